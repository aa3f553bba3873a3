// Package toyworld is a task built for EVOLM's co-evolution to learn on
// a CPU in minutes, played by tiny models trained from scratch (nanoGPT's
// Shakespeare, for this method).
//
// The task is short questions about the numbers 0…MaxNumber (99) with one
// right answer: "What number comes after 41?", "What number comes before
// 41?", "What is the largest of 17, 42 and 8?" and "What is the smallest of
// …" (three distinct numbers). Every question has distractors: wrong
// answers next to the right one (the other numbers of the question, ±1,
// ±2, ±10), all in 0…MaxNumber. The numbers stop at 99 so that the judge,
// a model trained from scratch, sees each number often enough to learn
// when a response's number is the criterion's: with a hundred numbers
// the toy preset learns it in about a thousand SFT steps; with a thousand
// it stays at chance for as long (measured with scripts/toyworld.py's
// settings before this choice).
// The 6,198 questions are split, seeded, into a held-out set (evaluation),
// an RL set (the prompts of `evolm run`) and an SFT set (the warm starts);
// the three are disjoint.
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
//   - tokenizer/: a byte-level BPE tokenizer for the tiny policy: Qwen3's
//     cut to the merges the data's texts use (a few hundred tokens, each
//     text encoded exactly as Qwen3 encodes it), with the chat special
//     tokens after them (Tokenizer); tokenizer_judge/: the same for the
//     judge's texts and answer tokens, with the numbers 10…99 as single
//     tokens (JudgeTokenizer).
//
// Every file is a function of the seed. The prompts are rendered with the
// same templates (prompts/, through method/prompts) that the toyworld
// preset gives `evolm run`, so the models are trained on exactly what the
// loop shows them.
package toyworld

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
)

// MaxNumber is the largest number a question, answer or distractor has.
const MaxNumber = 99

// Question is one arithmetic question.
type Question struct {
	ID          string // "next-41", "max-17-42-8"
	Text        string // "What number comes after 41?"
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

// universe lists every question in a fixed order: what comes after n and
// before n, and the largest and the smallest of three distinct numbers
// (3,000 triples each, drawn with a fixed seed), all in 0…MaxNumber.
func universe() []Question {
	var qs []Question
	for n := 0; n < MaxNumber; n++ {
		qs = append(qs, question(fmt.Sprintf("next-%d", n), fmt.Sprintf("What number comes after %d?", n), n+1, n, n+2, n+10, n-1))
	}
	for n := 1; n <= MaxNumber; n++ {
		qs = append(qs, question(fmt.Sprintf("prev-%d", n), fmt.Sprintf("What number comes before %d?", n), n-1, n, n-2, n-10, n+1))
	}
	r := rand.New(rand.NewPCG(0, 0x746f79))
	seen := map[string]bool{}
	for _, op := range []string{"max", "min"} {
		for k := 0; k < 3000; {
			a, b, c := r.IntN(MaxNumber+1), r.IntN(MaxNumber+1), r.IntN(MaxNumber+1)
			id := fmt.Sprintf("%s-%d-%d-%d", op, a, b, c)
			if a == b || b == c || a == c || seen[id] {
				continue
			}
			seen[id] = true
			k++
			lo, mid, hi := sort3(a, b, c)
			if op == "max" {
				qs = append(qs, question(id, fmt.Sprintf("What is the largest of %d, %d and %d?", a, b, c), hi, mid, lo, hi+1, hi-1))
			} else {
				qs = append(qs, question(id, fmt.Sprintf("What is the smallest of %d, %d and %d?", a, b, c), lo, mid, hi, lo+1, lo-1))
			}
		}
	}
	return qs
}

// question makes a question whose answer is right; the distractors are the
// wrong answers among wrong that are in 0…MaxNumber (duplicates dropped).
func question(id, text string, right int, wrong ...int) Question {
	q := Question{ID: id, Text: text, Answer: strconv.Itoa(right)}
	seen := map[int]bool{right: true}
	for _, d := range wrong {
		if d >= 0 && d <= MaxNumber && !seen[d] {
			seen[d] = true
			q.Distractors = append(q.Distractors, strconv.Itoa(d))
		}
	}
	return q
}

func sort3(a, b, c int) (lo, mid, hi int) {
	xs := []int{a, b, c}
	sort.Ints(xs)
	return xs[0], xs[1], xs[2]
}

// Split shuffles the questions with seed and splits them.
func Split(seed uint64) Splits {
	qs := universe()
	r := rand.New(rand.NewPCG(seed, 0x70757a))
	r.Shuffle(len(qs), func(i, j int) { qs[i], qs[j] = qs[j], qs[i] })
	return Splits{HeldOut: qs[:HeldOutSize], RL: qs[HeldOutSize : HeldOutSize+RLSize], SFT: qs[HeldOutSize+RLSize:]}
}
