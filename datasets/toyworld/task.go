// Package toyworld is a task on which EVOLM's co-evolution visibly learns on
// a CPU in minutes, played by tiny models trained from scratch (nanoGPT's
// Shakespeare, for this method).
//
// The task is short arithmetic with one right answer: "What is 17 + 25?"
// (a, b in 0…49) or "What is 83 - 41?" (a in 0…99, b in 0…min(a, 49)). Every
// question has distractors: wrong answers near the right one (±1, ±10, the
// digits swapped, the other operation). The 6,275 questions are split,
// seeded, into a held-out set (evaluation), an RL set (the prompts of
// `evolm run`) and an SFT set (the warm starts); the three are disjoint.
//
// The generator writes (Write):
//
//   - policy_sft.jsonl: chats for the warm start of the one model that is
//     the policy and the rubric generator: answers to questions; rubrics
//     in evolm's JSON format whose dealbreaker criterion (weight 0.8)
//     states the expected answer and a second criterion asks for a single
//     number; question back-translation; answers under a rubric in the
//     system prompt (the rubric-guided pair strategy), which copy the
//     rubric's stated answer, right or wrong;
//   - judge_sft.jsonl: prompt-completion pairs for the yes/no judge: the
//     judge prompt of a (question, response, criterion) and " yes" or " no"
//     — whether the response's number equals the criterion's, whether the
//     response is a single number — with near misses (41 against 42) as
//     negatives;
//   - prompts.parquet: the RL questions as a prompts table;
//   - heldout.jsonl (id, question, answer, distractor), heldout_prompts.parquet
//     (the held-out questions as a prompts table) and heldout_pairs.jsonl
//     (prompt, chosen = the answer, rejected = a distractor) for the
//     held-out evaluation;
//   - tokenizer/: a byte-level BPE tokenizer for the tiny policy, Qwen3's
//     truncated to its first 10,240 tokens and merges (the yes/no judge's
//     answer tokens are among them), with the chat special tokens after
//     them (Tokenizer); tokenizer_judge/: the same with the numbers 10…999
//     as single tokens, for the judge (JudgeTokenizer).
//
// Every file is a function of the seed. The prompts are rendered with the
// same templates (prompts/, through method/prompts) that the toyworld
// preset gives `evolm run`, so the models are trained on exactly what the
// loop shows them.
package toyworld

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// Question is one arithmetic question.
type Question struct {
	ID          string // "add-17-25", "sub-83-41"
	Text        string // "What is 17 + 25?"
	Answer      string // "42"
	Distractors []string
}

// Splits are the disjoint question sets.
type Splits struct {
	HeldOut, RL, SFT []Question
}

// Split sizes.
const (
	HeldOutSize = 300
	RLSize      = 1000
)

// universe lists every question in a fixed order.
func universe() []Question {
	var qs []Question
	for a := 0; a < 50; a++ {
		for b := 0; b < 50; b++ {
			qs = append(qs, newQuestion("add", a, b))
		}
	}
	for a := 0; a < 100; a++ {
		for b := 0; b <= min(a, 49); b++ {
			qs = append(qs, newQuestion("sub", a, b))
		}
	}
	return qs
}

func newQuestion(op string, a, b int) Question {
	q := Question{ID: fmt.Sprintf("%s-%d-%d", op, a, b)}
	right, other := a+b, a-b
	sym := "+"
	if op == "sub" {
		right, other, sym = a-b, a+b, "-"
	}
	q.Text = fmt.Sprintf("What is %d %s %d?", a, sym, b)
	q.Answer = strconv.Itoa(right)
	seen := map[int]bool{right: true}
	for _, d := range []int{right + 1, right - 1, right + 10, right - 10, swapDigits(right), other} {
		if d >= 0 && !seen[d] {
			seen[d] = true
			q.Distractors = append(q.Distractors, strconv.Itoa(d))
		}
	}
	return q
}

func swapDigits(n int) int {
	if n < 10 || n > 99 {
		return n
	}
	return (n%10)*10 + n/10
}

// Split shuffles the questions with seed and splits them.
func Split(seed uint64) Splits {
	qs := universe()
	r := rand.New(rand.NewPCG(seed, 0x70757a))
	r.Shuffle(len(qs), func(i, j int) { qs[i], qs[j] = qs[j], qs[i] })
	return Splits{HeldOut: qs[:HeldOutSize], RL: qs[HeldOutSize : HeldOutSize+RLSize], SFT: qs[HeldOutSize+RLSize:]}
}
