package optim

// ShardByTensor assigns whole parameter tensors to world ranks for ZeRO
// sharding (DeepSpeed flattens and cuts at element boundaries; whole
// tensors are simpler and keep every state file an ordinary per-parameter
// one). sizes are the parameters' element counts in the model's order; the
// result is each parameter's owner. The assignment is greedy, largest
// first, to the least-loaded rank (lowest rank on ties), so it is
// deterministic and balanced within one largest tensor.
func ShardByTensor(sizes []int64, world int) []int {
	owner := make([]int, len(sizes))
	if world <= 1 {
		return owner
	}
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	// Stable sort by size, descending (insertion-free: sort.SliceStable).
	sortStableDesc(order, sizes)
	load := make([]int64, world)
	for _, i := range order {
		best := 0
		for r := 1; r < world; r++ {
			if load[r] < load[best] {
				best = r
			}
		}
		owner[i] = best
		load[best] += sizes[i]
	}
	return owner
}

// ShardLoads returns the elements each rank owns under owner.
func ShardLoads(sizes []int64, owner []int, world int) []int64 {
	load := make([]int64, max(world, 1))
	for i, o := range owner {
		load[o] += sizes[i]
	}
	return load
}

func sortStableDesc(order []int, sizes []int64) {
	// A simple merge-free stable sort is enough for a few hundred tensors.
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && sizes[order[j]] > sizes[order[j-1]]; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
}
