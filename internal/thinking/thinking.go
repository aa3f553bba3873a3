// Package thinking splits a Qwen3-style completion into its reasoning
// (<think>…</think>) and its answer, exactly as the Qwen3 chat template reads
// an assistant turn. The engine's chat renderer (model/chat) and the method
// (pairs, judging, the loop's replay buffer) read answers through it.
package thinking

import "strings"

// Thinking is a completion split at its reasoning.
type Thinking struct {
	Reasoning string // text inside <think>…</think>, without surrounding newlines
	Answer    string // text after the last </think>, leading newlines dropped
	// Closed is false when a <think> was opened and never closed (the
	// generation stopped mid-thought): Answer is then the text before it.
	Closed bool
}

// Split separates reasoning from the answer exactly as the Qwen3
// template does for assistant turns: the answer is what follows the last
// </think>, the reasoning what precedes the first </think> after its last
// <think>. A completion with no think tags is all answer; one whose <think>
// was never closed (generation stopped mid-thought) has Closed false and, as
// its answer, the text before the <think>. With thinking on, the generation
// prompt ends right before the model's own "<think>".
func Split(completion string) Thinking {
	if strings.Contains(completion, "</think>") {
		parts := strings.Split(completion, "</think>")
		before := strings.Split(strings.TrimRight(parts[0], "\n"), "<think>")
		return Thinking{
			Reasoning: strings.TrimLeft(before[len(before)-1], "\n"),
			Answer:    strings.TrimLeft(parts[len(parts)-1], "\n"),
			Closed:    true,
		}
	}
	if j := strings.Index(completion, "<think>"); j >= 0 {
		return Thinking{Reasoning: strings.Trim(completion[j+len("<think>"):], "\n"), Answer: completion[:j]}
	}
	return Thinking{Answer: completion, Closed: true}
}

// Strip returns the completion without its thinking: the answer
// that Split finds.
func Strip(completion string) string { return Split(completion).Answer }
