package pipeline

// ResetRegistryErrs forgets rejected registrations, so that a test of
// Register's checks leaves the registry usable by the others.
func ResetRegistryErrs() {
	regMu.Lock()
	defer regMu.Unlock()
	regErrs = nil
}
