package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/internal/testutil"
	"github.com/evolm/evolm/serving/backend"
)

// syntheticTemplates is a test double of the official
// rubric_chat_templates.py, written for this test: the same shape (plain
// constants with literal braces and JSON examples, a registry of lambdas
// building f-strings with doubled braces, format_messages with the official
// signature), none of the official text.
const syntheticTemplates = `from collections.abc import Callable
from typing import Any

HELPER = "Act {kindly}."
RUBRIC_V1 = """Write a rubric as JSON: {"criteria": [{"criterion": "<text>", "weight": 0.5}]}
Use {{double}} braces literally."""
RUBRIC_V3 = """Write 2-3 criteria; a key one weighs 0.8.
Example: {"criteria": [{"criterion": "Answer is 4", "weight": 0.8, "scoring_levels": {"1.0": "yes", "0.0": "no"}}]}"""
JUDGE_SYSTEM = "You grade {answers}."

MESSAGE_FORMATTER_REGISTRY: dict[str, Callable[[dict[str, Any]], list[dict[str, str]]]] = {
    "policy": lambda content: [
        {"role": "system", "content": HELPER},
        {"role": "user", "content": content["question"]},
    ],
    "rubric_generation": lambda content: [
        {"role": "system", "content": RUBRIC_V1},
        {"role": "user", "content": content["question"]},
    ],
    "rubric_generation_v3": lambda content: [
        {"role": "system", "content": RUBRIC_V3},
        {"role": "user", "content": content["question"]},
    ],
    "judge": lambda content: [
        {"role": "system", "content": JUDGE_SYSTEM},
        {
            "role": "user",
            "content": f"""Q: {content["question"]}

Rubric: {{{content["rubric"]}}}

A: {content["answer"]}

Reply {{"reasoning": "<why>", "score": <0-1>}} like {{"reasoning": "ok {{x}}", "score": 0.5}}.""",
        },
    ],
    "question_inference": lambda content: [
        {"role": "system", "content": "Guess the question. Output only it."},
        {"role": "user", "content": f"""Answer:

{content["answer"]}

Question?` + "`" + `{{"""},
    ],
    "policy_with_rubric": lambda content: [
        {"role": "system", "content": f"""{HELPER}

Follow this rubric:

{content["rubric"]}"""},
        {"role": "user", "content": content["question"]},
    ],
    "unused_type": lambda content: [{"role": "user", "content": content["policy_answer"]}],
}


def format_messages(message_type, content, tokenizer=None, tokenize=True, add_generation_prompt=True, return_messages=False):
    if message_type not in MESSAGE_FORMATTER_REGISTRY:
        raise ValueError(f"Unknown message_type '{message_type}'")
    if tokenize and tokenizer is None:
        raise ValueError("tokenizer must be provided when tokenize=True")
    return MESSAGE_FORMATTER_REGISTRY[message_type](content)
`

const syntheticModule = "open_instruct/search_rewards/utils/rubric_chat_templates.py"

// writeCheckout writes a checkout holding module text at the official path.
func writeCheckout(t *testing.T, text string) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, syntheticModule)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// moduleMessages is the synthetic module's own format_messages output.
func moduleMessages(t *testing.T, checkout, msgType string, content map[string]string) []backend.Message {
	t.Helper()
	code := `import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("m", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
print(json.dumps(m.format_messages(sys.argv[2], json.loads(sys.argv[3]), tokenize=False)))`
	c, _ := json.Marshal(content)
	out, err := exec.Command(testutil.Python(t), "-c", code, filepath.Join(checkout, syntheticModule), msgType, string(c)).Output()
	if err != nil {
		t.Fatalf("format_messages(%s): %v", msgType, err)
	}
	var msgs []backend.Message
	if err := json.Unmarshal(out, &msgs); err != nil {
		t.Fatal(err)
	}
	return msgs
}

func pythonEnv(t *testing.T) {
	t.Setenv("EVOLM_PYTHON", testutil.Python(t))
	t.Setenv("EVOLM_ROOT", testutil.Root(t))
}

// TestPromptsImportMatchesTheModule: after `evolm prompts import`,
// `evolm --config DIR/paper-official.yaml prompts show NAME …` prints, for
// every prompt and contents full of braces, exactly the messages the
// module's format_messages returns.
func TestPromptsImportMatchesTheModule(t *testing.T) {
	pythonEnv(t)
	checkout := writeCheckout(t, syntheticTemplates)
	out := filepath.Join(t.TempDir(), "official")
	if msg, err := run(t, "prompts", "import", checkout, "--out", out); err != nil {
		t.Fatalf("import: %v\n%s", err, msg)
	}
	for _, f := range []string{"policy.tmpl", "policy_with_rubric.tmpl", "question_inference.tmpl", "judge_generative.tmpl",
		"rubric_question.rubric_generation.tmpl", "rubric_question.rubric_generation_v3.tmpl", "paper-official.yaml"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("import did not write %s: %v", f, err)
		}
	}
	cfg := filepath.Join(out, "paper-official.yaml")
	contents := []map[string]string{
		{"question": "What is {x}?\nAnswer `fast`.", "answer": `It is }} {{.Answer}} {"a": {"b": 1}}`, "rubric": `{"criteria": [{"criterion": "States {x}", "weight": 1.0}]} {{`},
		{"question": "Q", "answer": "", "rubric": ""},
	}
	names := map[string]string{"policy": "policy", "policy_with_rubric": "policy_with_rubric", "rubric_question": "rubric_generation_v3",
		"judge_generative": "judge", "question_inference": "question_inference"}
	for name, msgType := range names {
		for _, c := range contents {
			got, err := run(t, "--config", cfg, "prompts", "show", name, "--question", c["question"], "--answer", c["answer"], "--rubric", c["rubric"])
			if err != nil {
				t.Fatalf("show %s: %v\n%s", name, err, got)
			}
			var msgs []backend.Message
			if err := json.Unmarshal([]byte(got), &msgs); err != nil {
				t.Fatalf("show %s printed %q: %v", name, got, err)
			}
			if d := cmp.Diff(moduleMessages(t, checkout, msgType, c), msgs); d != "" {
				t.Errorf("%s (%s) for %q (-format_messages +evolm):\n%s", name, msgType, c, d)
			}
		}
	}
	// --rubric-prompt picks the rubric prompt the preset uses.
	if msg, err := run(t, "prompts", "import", checkout, "--out", out, "--rubric-prompt", "rubric_generation"); err != nil {
		t.Fatalf("import --rubric-prompt: %v\n%s", err, msg)
	}
	got, err := run(t, "--config", cfg, "prompts", "show", "rubric_question", "--question", "Q?")
	if err != nil || !strings.Contains(got, "Use {{double}} braces literally.") {
		t.Errorf("show rubric_question under --rubric-prompt rubric_generation: %v\n%s", err, got)
	}
}

// TestPromptsImportFailsNamingWhatIsMissing: a missing or malformed
// checkout fails naming what is missing, and writes nothing.
func TestPromptsImportFailsNamingWhatIsMissing(t *testing.T) {
	pythonEnv(t)
	tests := []struct {
		name     string
		checkout func() string
		args     []string
		want     string
	}{
		{"no checkout", func() string { return filepath.Join(t.TempDir(), "nope") }, nil, "no such directory"},
		{"no module", func() string { return t.TempDir() }, nil, "has no module " + syntheticModule},
		{"module does not load", func() string { return writeCheckout(t, "def broken(:\n") }, nil, "does not load"},
		{"module imports what is not installed", func() string { return writeCheckout(t, "import no_such_module_evolm\n") }, nil, "ModuleNotFoundError"},
		{"no format_messages", func() string { return writeCheckout(t, "MESSAGE_FORMATTER_REGISTRY = {}\n") }, nil, "has no function format_messages"},
		{"message type missing", func() string {
			return writeCheckout(t, strings.Replace(syntheticTemplates, `"question_inference":`, `"question_guess":`, 1))
		}, nil, "message type 'question_inference' is not in"},
		{"rubric prompt missing", func() string { return writeCheckout(t, syntheticTemplates) }, []string{"--rubric-prompt", "rubric_generation_v9"}, "message type 'rubric_generation_v9' is not in"},
		{"content key evolm lacks", func() string {
			return writeCheckout(t, strings.Replace(syntheticTemplates, `"Guess the question. Output only it."`, `content["reference"]`, 1))
		}, nil, "needs content key 'reference'"},
		{"policy user turn not the question", func() string {
			return writeCheckout(t, strings.Replace(syntheticTemplates, `{"role": "user", "content": content["question"]},
    ],
    "rubric_generation":`, `{"role": "user", "content": "Q: " + content["question"]},
    ],
    "rubric_generation":`, 1))
		}, nil, `message type "policy" (for evolm's policy prompt): the user message is not the bare question`},
		{"template transforms its contents", func() string {
			return writeCheckout(t, strings.Replace(syntheticTemplates, `{content["answer"]}

Question?`, `{content["answer"].strip()}

Question?`, 1))
		}, nil, "message type question_inference: the written question_inference.tmpl renders"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "official")
			_, err := run(t, append([]string{"prompts", "import", tt.checkout(), "--out", out}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a failed import left %s (%v)", out, err)
			}
		})
	}
}

// TestPromptsShowDefault: evolm's own prompts, as configured; the rubric is
// inserted as given.
func TestPromptsShowDefault(t *testing.T) {
	rubric := `{"criteria": [{"criterion": "States 4", "weight": 0.8}, {"criterion": "Brief", "weight": 0.2}]}` + "\nand a note"
	got, err := run(t, "prompts", "show", "judge_generative", "--question", "2+2?", "--answer", "4", "--rubric", rubric)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []backend.Message
	if err := json.Unmarshal([]byte(got), &msgs); err != nil || len(msgs) != 2 || !strings.HasPrefix(msgs[1].Content, "Question: 2+2?\n\nRubric: "+rubric+"\n\nAnswer to evaluate: 4\n\n") {
		t.Errorf("show judge_generative = %v (%v)", msgs, err)
	}
	got, err = run(t, "prompts", "show", "policy", "--question", "Hi", "--policy-prompt-variant", "assistant")
	if err != nil || !strings.Contains(got, `"content": "You are a helpful assistant."`) {
		t.Errorf("show policy with the assistant variant: %v\n%s", err, got)
	}
	if _, err := run(t, "prompts", "show", "rubric_pair"); err == nil || !strings.Contains(err.Error(), "want one of policy") {
		t.Errorf("show rubric_pair: err = %v", err)
	}
}
