package analyze

import "testing"

// labelled are criteria written for this test, each with the class a reader
// would give it (A: abstract, V: concrete value, C: constraint).
var labelled = []struct {
	text string
	want Class
}{
	// Abstract labels.
	{"Accuracy", Class{Abstract: true}},
	{"Clarity", Class{Abstract: true}},
	{"Helpfulness", Class{Abstract: true}},
	{"Clarity and conciseness", Class{Abstract: true}},
	{"Overall Quality", Class{Abstract: true}},
	{"Factual accuracy.", Class{Abstract: true}},
	{"Code correctness", Class{Abstract: true}},
	{"Relevance to the user's question", Class{Abstract: true}},
	{"Logical flow and coherence", Class{Abstract: true}},
	{"Emotional resonance", Class{Abstract: true}},
	{"Well-structured", Class{Abstract: true}},
	{"Tone:", Class{Abstract: true}},
	{"Accuracy of the final answer", Class{Abstract: true}},
	{"Instruction following", Class{Abstract: true}},
	// Concrete expected values.
	{"The answer is 12", Class{Concrete: true}},
	{"States that the capital of Australia is Canberra", Class{Concrete: true}},
	{"Correctly computes 15% of 80 as 12", Class{Concrete: true}},
	{"Uses the term \"photosynthesis\"", Class{Concrete: true}},
	{"Mentions the `sorted()` built-in", Class{Concrete: true}},
	{"Does the response mention the Treaty of Versailles?", Class{Concrete: true}},
	{"Identifies x = 5 as the solution", Class{Concrete: true}},
	{"Accuracy: the final answer equals 3/4", Class{Concrete: true}},
	{"Gives the date of the moon landing (1969)", Class{Concrete: true}},
	{"Quotes the line 'to be or not to be'", Class{Concrete: true}},
	// Constraints.
	{"Response is under 200 words", Class{Constraint: true}},
	{"Lists at least 3 examples", Class{Constraint: true}},
	{"Does not recommend specific medication dosages", Class{Constraint: true}},
	{"Avoids technical jargon", Class{Constraint: true}},
	{"Must cite a source for each claim", Class{Constraint: true}},
	{"Never reveals the system prompt", Class{Constraint: true}},
	{"Is exactly one sentence long", Class{Constraint: true}},
	{"Uses no more than five bullet points", Class{Constraint: true}},
	{"Answers in English only", Class{Constraint: true, Concrete: true}},
	{"Uses at most 2 quotations from 'Hamlet'", Class{Constraint: true, Concrete: true}},
	{"The response should not exceed 100 words", Class{Constraint: true}},
	// Hard negatives: content without a value or a constraint, and not labels.
	{"Explains the reasoning clearly", Class{}},
	{"Explains why the sky is blue", Class{}},
	{"Provides a step-by-step derivation", Class{}},
	{"Addresses the user's question directly", Class{}},
	{"Clarity: the explanation defines every term it uses", Class{}},
	{"The response should acknowledge the user's frustration", Class{}},
	{"Includes a concrete example of recursion", Class{}},
	{"Is the tone friendly and encouraging?", Class{}},
}

func TestClassify(t *testing.T) {
	if len(labelled) < 30 {
		t.Fatalf("only %d labelled examples", len(labelled))
	}
	for _, tc := range labelled {
		if got := Classify(tc.text); got != tc.want {
			t.Errorf("Classify(%q) = %+v, want %+v", tc.text, got, tc.want)
		}
	}
}
