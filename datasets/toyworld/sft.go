package toyworld

import (
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/serving/backend"
)

// Weights of the two criteria of a toyworld rubric.
const (
	DealbreakerWeight = 0.8
	FormatWeight      = 0.2
)

// FormatCriterion is the second criterion of every toyworld rubric.
const FormatCriterion = "The answer is a single number."

// AnswerCriterion is the dealbreaker criterion that states the expected
// answer.
func AnswerCriterion(answer string) string { return "The answer is " + answer + "." }

// Rubric is the rubric, in evolm's JSON format, that states answer.
func Rubric(answer string) string {
	return fmt.Sprintf(`{"criteria": [{"criterion": %q, "weight": %.1f}, {"criterion": %q, "weight": %.1f}]}`,
		AnswerCriterion(answer), DealbreakerWeight, FormatCriterion, FormatWeight)
}

// Chat is one SFT conversation.
type Chat struct {
	Kind     string // answer, rubric, question_inference, rubric_guided
	Messages []backend.Message
}

// PolicySFT returns the warm-start chats of the policy and rubric
// generator for the questions: an answer to each, a rubric for every
// second one, and a question back-translation and a rubric-guided answer
// for every fourth one, shuffled with seed. all is the whole question set
// (back-translation picks a question with the same answer from it).
func PolicySFT(set *prompts.Set, qs, all []Question, seed uint64) ([]Chat, error) {
	r := rand.New(rand.NewPCG(seed, 0x706f6c))
	byAnswer := map[string][]Question{}
	for _, q := range all {
		byAnswer[q.Answer] = append(byAnswer[q.Answer], q)
	}
	var out []Chat
	for i, q := range qs {
		out = append(out, Chat{Kind: "answer", Messages: []backend.Message{{Role: "user", Content: q.Text}, {Role: "assistant", Content: q.Answer}}})
		if i%2 == 0 {
			msgs, err := set.RubricForQuestion(q.Text)
			if err != nil {
				return nil, err
			}
			out = append(out, Chat{Kind: "rubric", Messages: append(msgs, backend.Message{Role: "assistant", Content: Rubric(q.Answer)})})
		}
		if i%4 == 1 {
			same := byAnswer[q.Answer]
			msgs, err := set.QuestionInference(q.Answer)
			if err != nil {
				return nil, err
			}
			out = append(out, Chat{Kind: "question_inference", Messages: append(msgs, backend.Message{Role: "assistant", Content: same[r.IntN(len(same))].Text})})
		}
		if i%4 == 3 {
			stated := q.Answer
			if r.Float64() < 0.3 {
				stated = q.Distractors[r.IntN(len(q.Distractors))]
			}
			sys, err := set.PolicyWithRubric(prompts.Rubric{Text: Rubric(stated)})
			if err != nil {
				return nil, err
			}
			out = append(out, Chat{Kind: "rubric_guided", Messages: []backend.Message{{Role: "system", Content: sys}, {Role: "user", Content: q.Text}, {Role: "assistant", Content: stated}}})
		}
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out, nil
}

// Completion is one prompt-completion SFT example.
type Completion struct {
	Prompt, Completion string
}

// JudgeSFT returns the yes/no judge's warm-start examples, perQuestion for
// each question, shuffled with seed. Responses are the right answer, a
// distractor, another number or not a bare number; criteria are the
// dealbreaker (a number equal to the response's, or a near miss of it) or
// the format criterion; the answers are half yes, half no.
func JudgeSFT(set *prompts.Set, qs []Question, perQuestion int, seed uint64) ([]Completion, error) {
	r := rand.New(rand.NewPCG(seed, 0x6a7564))
	var out []Completion
	for _, q := range qs {
		for range perQuestion {
			resp, num, bare := judgeResponse(r, q)
			var crit string
			yes := r.IntN(2) == 0
			switch {
			case r.Float64() < 0.3 && (bare == yes): // the format criterion
				crit = FormatCriterion
			case yes:
				crit = AnswerCriterion(num)
			default:
				crit = AnswerCriterion(nearMiss(r, q, num))
			}
			prefix, suffixes, err := set.JudgeYesNo(q.Text, resp, []prompts.Criterion{{Criterion: crit, Weight: 1}})
			if err != nil {
				return nil, err
			}
			c := " no"
			if yes {
				c = " yes"
			}
			out = append(out, Completion{Prompt: prefix + suffixes[0], Completion: c})
		}
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out, nil
}

// judgeResponse draws a response to q, the number it states and whether it
// is a bare number.
func judgeResponse(r *rand.Rand, q Question) (resp, num string, bare bool) {
	n := q.Answer
	switch x := r.Float64(); {
	case x < 0.4:
	case x < 0.8:
		n = q.Distractors[r.IntN(len(q.Distractors))]
	default:
		n = strconv.Itoa(r.IntN(MaxNumber + 1))
	}
	if r.Float64() < 0.85 {
		return n, n, true
	}
	forms := []string{"The answer is %s.", "%s.", "It is %s", "%s?", "= %s"}
	return fmt.Sprintf(forms[r.IntN(len(forms))], n), n, false
}

// nearMiss returns a number other than n, usually close to it.
func nearMiss(r *rand.Rand, q Question, n string) string {
	v, _ := strconv.Atoi(n)
	cands := []int{v + 1, v - 1, v + 10, v - 10, v + 2, r.IntN(MaxNumber + 1)}
	if a, _ := strconv.Atoi(q.Answer); a != v {
		cands = append(cands, a, a)
	}
	for {
		c := cands[r.IntN(len(cands))]
		if c >= 0 && c <= MaxNumber && c != v {
			return strconv.Itoa(c)
		}
		cands = append(cands, r.IntN(MaxNumber+1))
	}
}
