package pipeline

// ResetRegistryErrs forgets rejected registrations, so that a test of
// Register's checks leaves the registry usable by the others.
func ResetRegistryErrs() {
	regMu.Lock()
	defer regMu.Unlock()
	regErrs = nil
}

// ReportNow makes p report as its ticker would.
func ReportNow(p *Progress) { p.report(false) }
