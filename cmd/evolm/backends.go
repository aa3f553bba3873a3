package main

// Backends register themselves with serving/roles in init(); importing them
// here is what makes roles.<role>.backend accept their names. Add one line
// per backend.
import (
	_ "github.com/evolm/evolm/serving/openai"  // OpenAI-compatible servers and fleets
	_ "github.com/evolm/evolm/serving/torchbe" // in process on libtorch
)
