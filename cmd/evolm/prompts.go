package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/evolm/evolm/method/prompts"
	"github.com/evolm/evolm/pipeline"
	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/roles"
	"github.com/evolm/evolm/stages/presets"
	"github.com/evolm/evolm/stages/rubrics"
)

func init() { extraCommands = append(extraCommands, newPromptsCmd) }

func newPromptsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prompts",
		Short: "Import the official EVOLM prompts; show the messages a prompt sends",
	}
	cmd.AddCommand(newPromptsImportCmd(), newPromptsShowCmd(a))
	return cmd
}

// officialScript is the Python side of `evolm prompts import`, under the
// project's scripts/.
const officialScript = "prompts_import.py"

// defaultRubricPrompt is the official rubric prompt the paper's main run
// names (its evaluation scripts and qualitative_eval.py).
const defaultRubricPrompt = "rubric_generation_v3"

func newPromptsImportCmd() *cobra.Command {
	var out, rubricPrompt string
	cmd := &cobra.Command{
		Use:   "import EVOLM_CHECKOUT --out DIR",
		Short: "Write evolm prompt files that send the official EVOLM prompts, read from your clone",
		Long: `Loads open_instruct/search_rewards/utils/rubric_chat_templates.py from a clone of
the official EVOLM repository (https://github.com/stellalisy/EvoLM) with the
project's Python ($EVOLM_PYTHON, else .venv/bin/python of the evolm checkout,
else python3; the module imports transformers), calls its
format_messages(message_type, content, tokenize=False) with marker contents,
and writes to DIR one evolm template per prompt that renders to the same
messages for any contents:

  policy.tmpl                 message type policy (the system prompt)
  policy_with_rubric.tmpl     policy_with_rubric
  question_inference.tmpl     question_inference
  judge_generative.tmpl       judge
  rubric_question.<T>.tmpl    rubric_generation, rubric_generation_v3 and --rubric-prompt T

and DIR/paper-official.yaml: the paper preset with every role's prompt_files
pointing at these files (the rubric generator at --rubric-prompt's). Each
template is checked against format_messages on contents full of braces and
template syntax before anything is written. evolm holds none of the official
text; the files hold it, read from your clone.`,
		Example: `  git clone https://github.com/stellalisy/EvoLM ../EvoLM
  evolm prompts import ../EvoLM --out prompts/official
  evolm --config prompts/official/paper-official.yaml --run paper run`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return errors.New("--out DIR is required")
			}
			return importOfficial(cmd.Context(), args[0], out, rubricPrompt, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write the prompt files and paper-official.yaml to")
	cmd.Flags().StringVar(&rubricPrompt, "rubric-prompt", defaultRubricPrompt, "the official rubric prompt (message type) paper-official.yaml uses")
	return cmd
}

// officialReply is what scripts/prompts_import.py prints.
type officialReply struct {
	Module   string                         `json:"module"`
	SHA256   string                         `json:"sha256"`
	Messages map[string][][]backend.Message `json:"messages"`
	Error    string                         `json:"error"`
}

// importOfficial is `evolm prompts import`.
func importOfficial(ctx context.Context, checkout, out, rubricPrompt string, stdout io.Writer) error {
	checkout, err := filepath.Abs(checkout)
	if err != nil {
		return err
	}
	if out, err = filepath.Abs(out); err != nil {
		return err
	}
	markers, err := newMarkers()
	if err != nil {
		return err
	}
	contents := append([]prompts.Contents{{Question: markers["question"], Answer: markers["answer"], Rubric: markers["rubric"]}}, importProbes...)
	var types []string
	for _, r := range prompts.ImportRoles {
		if r.Name != prompts.RubricQuestion {
			types = append(types, r.MessageType)
		}
	}
	rubricTypes := prompts.RubricMessageTypes
	if !slices.Contains(rubricTypes, rubricPrompt) {
		rubricTypes = append(slices.Clone(rubricTypes), rubricPrompt)
	}
	types = append(types, rubricTypes...)
	reply, err := runOfficial(ctx, checkout, types, contents)
	if err != nil {
		return err
	}
	files, err := importedFiles(reply, markers, rubricTypes)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), "."+filepath.Base(out)+".import-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), src.body, 0o644); err != nil {
			return err
		}
	}
	if err := checkProbes(tmp, files, reply); err != nil {
		return err
	}
	// The templates move into place, then the config that names them,
	// checked where it will live.
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := os.Rename(filepath.Join(tmp, name), filepath.Join(out, name)); err != nil {
			return err
		}
	}
	yml, err := officialPreset(checkout, out, rubricPrompt, reply)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(tmp, "paper-official.yaml")
	if err := os.WriteFile(cfgPath, yml, 0o644); err != nil {
		return err
	}
	if err := checkPreset(cfgPath); err != nil {
		return fmt.Errorf("the written paper-official.yaml does not load: %w", err)
	}
	if err := os.Rename(cfgPath, filepath.Join(out, "paper-official.yaml")); err != nil {
		return err
	}
	for _, name := range append(names, "paper-official.yaml") {
		fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(out, name))
	}
	fmt.Fprintf(stdout, "from %s (sha256 %s); run: evolm --config %s --run paper run\n",
		filepath.Join(checkout, reply.Module), reply.SHA256, filepath.Join(out, "paper-official.yaml"))
	return nil
}

// importProbes are contents the written templates must render as the
// official code does: braces, doubled braces, template actions, backquotes,
// new lines, surrounding white space, upper case, and nothing at all.
var importProbes = []prompts.Contents{
	{Question: " What is {x} in {{.Question}}?\nSay `y`.\n", Answer: "\n  It is }} {{ {\"a\": {\"b\": [1, 2]}} \t", Rubric: ` {"criteria": [{"criterion": "C {d}", "weight": 1.0, "scoring_levels": {"1.0": "Yes"}}]} {{{{` + "\n"},
	{},
}

// newMarkers returns a marker string for each official content key, with a
// random nonce so that no template text holds one.
func newMarkers() (map[string]string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for key := range prompts.ContentKeys {
		out[key] = "\u27e6evolm-" + key + "-" + hex.EncodeToString(b[:]) + "\u27e7"
	}
	return out, nil
}

// runOfficial runs scripts/prompts_import.py on the checkout.
func runOfficial(ctx context.Context, checkout string, types []string, contents []prompts.Contents) (officialReply, error) {
	var reply officialReply
	if st, err := os.Stat(checkout); err != nil || !st.IsDir() {
		return reply, fmt.Errorf("checkout %s: no such directory (clone https://github.com/stellalisy/EvoLM and pass its path)", checkout)
	}
	script, err := projectFile(filepath.Join("scripts", officialScript))
	if err != nil {
		return reply, err
	}
	py, err := projectPython()
	if err != nil {
		return reply, err
	}
	cs := make([]map[string]string, len(contents))
	for i, c := range contents {
		cs[i] = map[string]string{"question": c.Question, "answer": c.Answer, "rubric": c.Rubric}
	}
	req, err := json.Marshal(map[string]any{"checkout": checkout, "types": types, "contents": cs})
	if err != nil {
		return reply, err
	}
	cmd := exec.CommandContext(ctx, py, script)
	cmd.Stdin = bytes.NewReader(req)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if err := json.Unmarshal(stdout.Bytes(), &reply); err != nil {
		return reply, fmt.Errorf("%s %s: %v; no answer on stdout (%v)\nstderr:\n%s", py, script, runErr, err, tail(stderr.String(), 2000))
	}
	if reply.Error != "" {
		return reply, fmt.Errorf("import from %s: %s", checkout, reply.Error)
	}
	if runErr != nil {
		return reply, fmt.Errorf("%s %s: %v\nstderr:\n%s", py, script, runErr, tail(stderr.String(), 2000))
	}
	for _, t := range types {
		if len(reply.Messages[t]) != len(contents) {
			return reply, fmt.Errorf("%s: message type %s: %d renderings for %d contents", script, t, len(reply.Messages[t]), len(contents))
		}
	}
	return reply, nil
}

// importedFile is a template the import writes.
type importedFile struct {
	role    prompts.Name
	msgType string
	body    []byte
}

// importedFiles builds every template from the marker renderings.
func importedFiles(reply officialReply, markers map[string]string, rubricTypes []string) (map[string]importedFile, error) {
	src := prompts.Source{Module: reply.Module, SHA256: reply.SHA256}
	out := map[string]importedFile{}
	for _, r := range prompts.ImportRoles {
		types, name := []string{r.MessageType}, func(string) string { return string(r.Name) + ".tmpl" }
		if r.Name == prompts.RubricQuestion {
			types, name = rubricTypes, func(t string) string { return string(r.Name) + "." + t + ".tmpl" }
		}
		for _, t := range types {
			body, err := prompts.Imported(r, t, reply.Messages[t][0], markers, src)
			if err != nil {
				return nil, err
			}
			out[name(t)] = importedFile{role: r.Name, msgType: t, body: body}
		}
	}
	return out, nil
}

// checkProbes renders every written template on the probe contents and
// compares the messages with format_messages' for them.
func checkProbes(dir string, files map[string]importedFile, reply officialReply) error {
	for name, f := range files {
		set, err := prompts.LoadOptions(prompts.Options{Overrides: map[prompts.Name]string{f.role: filepath.Join(dir, name)}})
		if err != nil {
			return fmt.Errorf("message type %s: the written %s: %w", f.msgType, name, err)
		}
		for i, c := range importProbes {
			got, err := set.Show(f.role, c, schemas.FormatStrict)
			if err != nil {
				return fmt.Errorf("message type %s: %w", f.msgType, err)
			}
			if want := reply.Messages[f.msgType][i+1]; !slices.Equal(got, want) {
				return fmt.Errorf("message type %s: the written %s renders %q for %+v, format_messages %q: the official template transforms its contents, which an evolm template cannot", f.msgType, name, got, c, want)
			}
		}
	}
	return nil
}

// officialPreset is paper-official.yaml: the paper preset with every role's
// prompt_files at the imported templates in dir.
func officialPreset(checkout, dir, rubricPrompt string, reply officialReply) ([]byte, error) {
	at := func(n prompts.Name, file string) string { return string(n) + "=" + filepath.Join(dir, file) }
	head := fmt.Sprintf("Written by `evolm prompts import`: the paper preset (stages/presets/paper.yaml) with\n"+
		"every role's prompts imported from the official EVOLM code,\n%s (sha256 %s),\n"+
		"the rubric generator's from message type %s.\nUse: evolm --config %s --run paper run",
		filepath.Join(checkout, reply.Module), reply.SHA256, rubricPrompt, filepath.Join(dir, "paper-official.yaml"))
	return presets.With("paper", head, map[string]any{
		roles.Section(roles.Policy) + "." + roles.KeyPromptFiles: []string{
			at(prompts.Policy, "policy.tmpl"), at(prompts.PolicyWithRubric, "policy_with_rubric.tmpl"), at(prompts.QuestionInference, "question_inference.tmpl")},
		roles.Section(roles.RubricGenerator) + "." + roles.KeyPromptFiles: []string{
			at(prompts.RubricQuestion, string(prompts.RubricQuestion)+"."+rubricPrompt+".tmpl")},
		roles.Section(roles.Judge) + "." + roles.KeyPromptFiles: []string{at(prompts.JudgeGenerative, "judge_generative.tmpl")},
	})
}

// checkPreset loads a written config and the role prompts it names.
func checkPreset(path string) error {
	cfg, err := pipeline.LoadConfig(pipeline.LoadOptions{File: path})
	if err != nil {
		return err
	}
	_, _, err = promptSet(cfg)
	return err
}

func newPromptsShowCmd(a *app) *cobra.Command {
	var c prompts.Contents
	names := make([]string, len(prompts.ShowNames))
	for i, n := range prompts.ShowNames {
		names[i] = string(n)
	}
	cmd := &cobra.Command{
		Use:   "show NAME --question Q --answer A --rubric R",
		Short: "Print the chat messages a prompt sends for given contents, as JSON",
		Long: `Prints, as a JSON array of {"role", "content"}, the chat messages that prompt
NAME renders under the current config (roles.<role>.prompt_variant and
prompt_files; the role flags below) for the given question, answer and rubric: what the model
receives. NAME is one of ` + strings.Join(names, ", ") + `. The
policy's prompts are followed by the question as the user turn, as the loop
sends a single-turn prompt. The rubric is inserted as given, as the
generator wrote it (the loop removes its reasoning first, as the official code
does); prompts that list its criteria parse them under rubric.format.`,
		Example: `  evolm prompts show judge_generative --question 'What is 2+2?' --answer 4 --rubric '{"criteria": [...]}'
  evolm --config prompts/official/paper-official.yaml prompts show question_inference --answer 'Paris.'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			set, rules, err := promptSet(a.cfg)
			if err != nil {
				return err
			}
			msgs, err := set.Show(prompts.Name(args[0]), c, rules.Format)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			return enc.Encode(msgs)
		},
	}
	cmd.Flags().StringVar(&c.Question, "question", "", "the question")
	cmd.Flags().StringVar(&c.Answer, "answer", "", "the answer (judge_generative, question_inference)")
	cmd.Flags().StringVar(&c.Rubric, "rubric", "", "the rubric as the generator wrote it (policy_with_rubric, judge_generative)")
	// The roles' and the rubric section's flags (--policy-prompt-variant,
	// --judge-prompt-files, --rubric-format, …).
	uses := append(roles.Uses(roles.Policy, roles.RubricGenerator, roles.Judge), rubrics.Section)
	if err := pipeline.AddStageFlags(cmd.Flags(), pipeline.Spec{Name: "prompts", Uses: uses}); err != nil {
		panic(err) // the sections are registered by init(): a programming error
	}
	return cmd
}

// promptSet loads the role prompts and the rubric rules of a config. A role
// whose model is not set yet is no error here: only its prompts matter.
func promptSet(cfg *pipeline.Config) (*prompts.Set, rubrics.Rules, error) {
	var cs []roles.Config
	for _, r := range roles.Names {
		c, err := roles.Read(cfg, r)
		if err != nil && !errors.Is(err, pipeline.ErrUnset) {
			return nil, rubrics.Rules{}, err
		}
		cs = append(cs, c)
	}
	set, err := roles.Prompts(cs...)
	if err != nil {
		return nil, rubrics.Rules{}, err
	}
	rules, err := rubrics.ReadRules(cfg)
	return set, rules, err
}

// projectRoots are where the evolm checkout may be: $EVOLM_ROOT, the
// working directory and its parents, the executable's directory and its
// parents.
func projectRoots() []string {
	var roots []string
	if r := os.Getenv("EVOLM_ROOT"); r != "" {
		roots = append(roots, r)
	}
	parents := func(d string) {
		for ; ; d = filepath.Dir(d) {
			roots = append(roots, d)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if wd, err := os.Getwd(); err == nil {
		parents(wd)
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		parents(filepath.Dir(exe))
	}
	return roots
}

// projectFile finds rel below the evolm checkout.
func projectFile(rel string) (string, error) {
	for _, r := range projectRoots() {
		if p := filepath.Join(r, rel); fileExists(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found under $EVOLM_ROOT, the working directory, the evolm executable's directory or their parents: set EVOLM_ROOT to the evolm checkout", rel)
}

// projectPython is $EVOLM_PYTHON, else the checkout's .venv/bin/python
// (`make venv`), else python3 on the PATH.
func projectPython() (string, error) {
	if p := os.Getenv("EVOLM_PYTHON"); p != "" {
		return p, nil
	}
	if p, err := projectFile(filepath.Join(".venv", "bin", "python")); err == nil {
		return p, nil
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		return "", errors.New("no Python: set EVOLM_PYTHON, run `make venv` in the evolm checkout, or put python3 on the PATH")
	}
	return p, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
