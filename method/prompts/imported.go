package prompts

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/evolm/evolm/schemas"
	"github.com/evolm/evolm/serving/backend"
)

// Imported prompts. `evolm prompts import` calls the official EVOLM code's
// format_messages(message_type, content, tokenize=False) with a marker
// string in place of each content value (question, answer, rubric), and
// turns the messages it returns into evolm template files that render to the
// same messages for any contents (Imported). Nothing of the official text is
// part of evolm: it is read from the user's own clone.

// ContentKeys are the official content keys the importer fills, with the
// template field each becomes.
var ContentKeys = map[string]string{"question": "Question", "answer": "Answer", "rubric": "Rubric"}

// ImportRole is one evolm prompt the importer writes: the official message
// type it comes from by default and the content keys the prompt's data
// provides. A prompt whose Question is the user turn is a system prompt
// (policy, policy_with_rubric): the official message type's user turn must
// be the bare question.
type ImportRole struct {
	Name        Name
	MessageType string
	// Fields maps each official content key the prompt can show to its
	// template field.
	Fields map[string]string
	// QuestionIsUser: the user turn is the question itself (not a template).
	QuestionIsUser bool
}

// ImportRoles lists the prompts the importer writes. The rubric
// generator's message type is chosen by name (RubricMessageTypes).
var ImportRoles = []ImportRole{
	{Name: Policy, MessageType: "policy", QuestionIsUser: true},
	{Name: PolicyWithRubric, MessageType: "policy_with_rubric", Fields: map[string]string{"rubric": "Rubric"}, QuestionIsUser: true},
	{Name: RubricQuestion, MessageType: "rubric_generation_v3", Fields: map[string]string{"question": "Question"}},
	{Name: JudgeGenerative, MessageType: "judge", Fields: map[string]string{"question": "Question", "rubric": "Rubric", "answer": "Response"}},
	{Name: QuestionInference, MessageType: "question_inference", Fields: map[string]string{"answer": "Answer"}},
}

// RubricMessageTypes are the official rubric prompts the importer writes
// besides the one chosen: the default and the one the paper's main run
// names.
var RubricMessageTypes = []string{"rubric_generation", "rubric_generation_v3"}

// Source says where imported messages came from, for the file header.
type Source struct {
	Module string // the module's path inside the checkout
	SHA256 string // the module file's SHA-256 (hex)
}

// Imported returns the template file of prompt r that renders to msgs, the
// messages message type msgType returned for markers (content key → the
// marker string that stood for it). It fails, naming the message type, when
// the messages cannot be an evolm prompt of r: a role other than system and
// user, no user turn or turns out of order, a content key r does not
// provide, or (for a system prompt) a user turn that is not the bare
// question. The file is checked: rendered with the markers, it gives msgs
// back.
func Imported(r ImportRole, msgType string, msgs []backend.Message, markers map[string]string, src Source) ([]byte, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("message type %q (for evolm's %s prompt): %s", msgType, r.Name, fmt.Sprintf(format, args...))
	}
	var system, user *backend.Message
	for i := range msgs {
		switch m := &msgs[i]; {
		case m.Role == "system" && i == 0 && len(msgs) == 2:
			system = m
		case m.Role == "user" && i == len(msgs)-1:
			user = m
		default:
			return nil, fail("messages %s: evolm sends an optional system message and then one user message", roleList(msgs))
		}
	}
	if user == nil {
		return nil, fail("no user message")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "{{- /* evolm-prompt name=%s variant=%s version=1\n", r.Name, msgType)
	fmt.Fprintf(&b, "Imported by `evolm prompts import` from the official EVOLM code: %s,\n", src.Module)
	fmt.Fprintf(&b, "message type %s (sha256 of the module %s). It renders to the messages\n", msgType, src.SHA256)
	b.WriteString("format_messages returns for the same contents. */ -}}\n")
	fields := r.Fields
	if system != nil {
		body, err := templateBody(system.Content, markers, fields)
		if err != nil {
			return nil, fail("system message: %v", err)
		}
		fmt.Fprintf(&b, "{{define \"system\"}}%s{{end}}\n", body)
	}
	if r.QuestionIsUser {
		if user.Content != markers["question"] {
			return nil, fail("the user message is not the bare question (evolm's %s prompt is a system prompt; the user turns are the prompt's own)", r.Name)
		}
		if system == nil {
			// No system prompt: an empty one, which sends none.
			b.WriteString("{{define \"system\"}}{{end}}\n")
		}
	} else {
		body, err := templateBody(user.Content, markers, fields)
		if err != nil {
			return nil, fail("user message: %v", err)
		}
		fmt.Fprintf(&b, "{{define \"user\"}}%s{{end}}\n", body)
	}
	out := []byte(b.String())
	// The file must give the messages back.
	t, err := parse(r.Name, out, "import of "+msgType)
	if err != nil {
		return nil, fail("%v", err)
	}
	set := &Set{tmpls: map[Name]*Template{r.Name: t}}
	got, err := set.Show(r.Name, Contents{Question: markers["question"], Answer: markers["answer"], Rubric: markers["rubric"]}, schemas.FormatStrict)
	if err != nil {
		return nil, fail("%v", err)
	}
	if !slices.Equal(got, msgs) {
		return nil, fail("the written template renders %s, not the messages format_messages returned", roleList(got))
	}
	return out, nil
}

// templateBody turns a message's content into a template body: each marker
// becomes its field ({{.Field}}), and the text between stays as it is,
// except text that text/template would read as an action (it holds "{{", or
// ends in '{' right before a field), which becomes a string constant.
func templateBody(content string, markers map[string]string, fields map[string]string) (string, error) {
	type hit struct {
		at  int
		key string
	}
	var hits []hit
	for key, m := range markers {
		for i := 0; ; {
			j := strings.Index(content[i:], m)
			if j < 0 {
				break
			}
			hits = append(hits, hit{i + j, key})
			i += j + len(m)
		}
	}
	sort.Slice(hits, func(a, c int) bool { return hits[a].at < hits[c].at })
	var b strings.Builder
	pos := 0
	for _, h := range hits {
		field, ok := fields[h.key]
		if !ok {
			have := slices.Sorted(func(yield func(string) bool) {
				for k := range fields {
					if !yield(k) {
						return
					}
				}
			})
			if len(have) == 0 {
				have = []string{"none"}
			}
			return "", fmt.Errorf("it shows content key %q, which this prompt does not have (it has: %s)", h.key, strings.Join(have, ", "))
		}
		b.WriteString(literal(content[pos:h.at]))
		b.WriteString("{{." + field + "}}")
		pos = h.at + len(markers[h.key])
	}
	b.WriteString(literal(content[pos:]))
	return b.String(), nil
}

// literal is text as a template writes it (an action always follows it: a
// field or the {{end}} of its define): as it is when text/template reads it
// back as text, else a string constant action.
func literal(s string) string {
	if !strings.Contains(s, "{{") && !strings.HasSuffix(s, "{") {
		return s
	}
	if !strings.Contains(s, "`") {
		return "{{`" + s + "`}}"
	}
	return "{{" + strconv.Quote(s) + "}}"
}

func roleList(msgs []backend.Message) string {
	roles := make([]string, len(msgs))
	for i, m := range msgs {
		roles[i] = m.Role
	}
	return "[" + strings.Join(roles, ", ") + "]"
}
