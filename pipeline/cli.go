package pipeline

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// FlagKeyAnnotation marks a flag with the config key it sets.
const FlagKeyAnnotation = "evolm/config-key"

// AddFlag defines a flag on fs that sets config key when the user passes it.
// Its default is shown in help; it applies only if Changed, so it does not
// mask the config file or env vars.
func AddFlag(fs *pflag.FlagSet, name string, key string, typ FieldType, def any, usage string) error {
	// pflag takes a `quoted` word of the usage for the value's name
	// (--judge-backend evolm serve); quote with ' instead.
	usage = strings.ReplaceAll(usage, "`", "'")
	v, err := coerce(typ, def)
	if err != nil {
		return fmt.Errorf("flag --%s: default: %w", name, err)
	}
	switch typ {
	case TypeString:
		fs.String(name, v.(string), usage)
	case TypeInt:
		fs.Int(name, v.(int), usage)
	case TypeFloat:
		fs.Float64(name, v.(float64), usage)
	case TypeBool:
		fs.Bool(name, v.(bool), usage)
	case TypeDuration:
		fs.Duration(name, v.(time.Duration), usage)
	case TypeStrings:
		fs.StringSlice(name, v.([]string), usage)
	default:
		return fmt.Errorf("flag --%s: unknown type %q", name, typ)
	}
	return fs.SetAnnotation(name, FlagKeyAnnotation, []string{key})
}

// AddKeyFlag defines a flag for a config key of defaults.yaml, taking its
// type and default from there.
func AddKeyFlag(fs *pflag.FlagSet, name, key, usage string) error {
	known, defaults, err := knownKeys()
	if err != nil {
		return err
	}
	info, ok := known[key]
	if !ok {
		return fmt.Errorf("flag --%s: no config key %s", name, key)
	}
	return AddFlag(fs, name, key, info.typ, defaults[key], usage)
}

// AddStageFlags defines one flag per field of spec on fs, named after the
// key with "_" as "-" (prefixed with "<stage>-" if fs already has that name),
// and one per field of each section the stage uses, named
// --<section flag>-<key> (--policy-model, --judge-backend).
func AddStageFlags(fs *pflag.FlagSet, spec Spec) error {
	for _, f := range spec.Fields {
		name := strings.ReplaceAll(f.Key, "_", "-")
		if fs.Lookup(name) != nil {
			name = spec.Name + "-" + name
		}
		if err := AddFlag(fs, name, "stages."+spec.Name+"."+f.Key, f.Type, f.Default, flagUsage(f)); err != nil {
			return fmt.Errorf("stage %s: %w", spec.Name, err)
		}
	}
	for _, u := range spec.Uses {
		sec, ok := LookupSection(u)
		if !ok {
			return fmt.Errorf("stage %s: uses section %s, which is not registered", spec.Name, u)
		}
		for _, f := range sec.Fields {
			name := SectionFlag(sec, f.Key)
			if fs.Lookup(name) != nil {
				return fmt.Errorf("stage %s: flag --%s of section %s is already defined", spec.Name, name, sec.Name)
			}
			if err := AddFlag(fs, name, sec.Name+"."+f.Key, f.Type, f.Default, flagUsage(f)); err != nil {
				return fmt.Errorf("section %s: %w", sec.Name, err)
			}
		}
	}
	return nil
}

// SectionFlag is the flag name of key in section sec: --<Flag>-<key>.
func SectionFlag(sec SectionSpec, key string) string {
	return sec.Flag + "-" + strings.ReplaceAll(key, "_", "-")
}

func flagUsage(f Field) string {
	usage := f.Description
	if len(f.Enum) > 0 {
		usage += " (one of " + enumText(f.Enum) + ")"
	}
	if b := f.BoundsText(); b != "" {
		usage += " (" + b + ")"
	}
	return usage
}

// enumText lists allowed values, an empty one as "".
func enumText(vals []string) string {
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = v
		if v == "" {
			out[i] = `""`
		}
	}
	return strings.Join(out, ", ")
}

// sentence ends text with a full stop unless it ends in punctuation.
func sentence(text string) string {
	text = strings.TrimSpace(text)
	if text == "" || strings.ContainsAny(text[len(text)-1:], ".!?:") {
		return text
	}
	return text + "."
}

// FlagKeys maps config keys to the flags of fs defined by AddFlag or
// AddStageFlags, for LoadOptions.Flags.
func FlagKeys(fs *pflag.FlagSet) map[string]*pflag.Flag {
	out := map[string]*pflag.Flag{}
	fs.VisitAll(func(f *pflag.Flag) {
		if k := f.Annotations[FlagKeyAnnotation]; len(k) == 1 {
			out[k[0]] = f
		}
	})
	return out
}

// WriteSpecDoc renders a stage's documentation: summary, description, tables
// and a table of config fields with their key, env var, type, default, enum
// and example. `evolm stages` prints it; `evolm <stage> --help` prints it
// with each key's flag (WriteSpecDocFlags).
func WriteSpecDoc(w io.Writer, s Spec) error { return WriteSpecDocFlags(w, s, nil) }

// WriteSpecDocFlags is WriteSpecDoc naming, for each key that has one, its
// flag in flags (config key → flag name, as FlagNames returns them), so
// that each setting appears once in a command's help.
func WriteSpecDocFlags(w io.Writer, s Spec, flags map[string]string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\n", s.Name, s.Summary)
	if s.Description != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimSpace(s.Description))
	}
	fmt.Fprintf(&b, "\nInputs:  %s\nOutputs: %s\n", orNone(s.Inputs), orNone(s.Outputs))
	if len(s.Fields) > 0 {
		b.WriteString("\nConfig: key (in stages." + s.Name + "), flag, type, default, env var:\n")
		writeFields(&b, "stages."+s.Name, s.Fields, flags)
	}
	for _, u := range s.Uses {
		sec, ok := LookupSection(u)
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "\n%s: %s\nKey (in %s), flag, type, default, env var:\n", sec.Name, sec.Summary, sec.Name)
		writeFields(&b, sec.Name, sec.Fields, flags)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeFields renders a table of fields under prefix; flags names each
// key's flag (nil: the default names, --<key> with - for _).
func writeFields(b *strings.Builder, prefix string, fs []Field, flags map[string]string) {
	fields := append([]Field(nil), fs...)
	sort.SliceStable(fields, func(i, j int) bool { return fields[i].Key < fields[j].Key })
	for _, f := range fields {
		key := prefix + "." + f.Key
		head := "  " + f.Key
		if name, ok := flags[key]; ok {
			head += "  --" + name
		}
		fmt.Fprintf(b, "%s  %s  default %s  %s\n", head, f.Type, fmtValue(f.Default), EnvName(key))
		desc := sentence(strings.ReplaceAll(f.Description, "`", "'"))
		if len(f.Enum) > 0 {
			desc += " One of: " + enumText(f.Enum) + "."
		}
		if bt := f.BoundsText(); bt != "" {
			desc += " Range: " + bt + "."
		}
		if f.Example != nil {
			desc += " Example: " + fmtValue(f.Example) + "."
		}
		if f.Required {
			desc += " Required."
		}
		for _, line := range wrap(desc, 76) {
			b.WriteString("      " + line + "\n")
		}
	}
}

// FlagNames maps config keys to the names of the flags of fs that set them
// (AddFlag's annotation).
func FlagNames(fs *pflag.FlagSet) map[string]string {
	out := map[string]string{}
	for k, f := range FlagKeys(fs) {
		out[k] = f.Name
	}
	return out
}

// wrap splits text into lines of at most width bytes, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	return strings.Join(s, ", ")
}

func fmtValue(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case []string:
		return "[" + strings.Join(x, ", ") + "]"
	case nil:
		return "(none)"
	}
	return fmt.Sprint(v)
}

// AddAllStageFlags defines on fs the flags of every registered stage, for
// commands that take any stage's settings (`evolm config print`). A flag
// name that only one stage defines keeps its plain form (--lr); a name that
// several stages define is spelled with its stage (--rollout.n,
// --rubrics.n). Names fs already has are left to fs. The registered
// sections' flags follow, once each (--policy-model, --judge-temperature).
func AddAllStageFlags(fs *pflag.FlagSet) error {
	owners := map[string]int{}
	for _, spec := range Specs() {
		for _, f := range spec.Fields {
			owners[strings.ReplaceAll(f.Key, "_", "-")]++
		}
	}
	for _, spec := range Specs() {
		for _, f := range spec.Fields {
			name := strings.ReplaceAll(f.Key, "_", "-")
			if owners[name] > 1 || fs.Lookup(name) != nil {
				name = spec.Name + "." + name
			}
			usage := spec.Name + ": " + flagUsage(f)
			if err := AddFlag(fs, name, "stages."+spec.Name+"."+f.Key, f.Type, f.Default, usage); err != nil {
				return fmt.Errorf("stage %s: %w", spec.Name, err)
			}
		}
	}
	// The registered sections' flags (--policy-model …), once each.
	for _, sec := range Sections() {
		for _, f := range sec.Fields {
			name := SectionFlag(sec, f.Key)
			if fs.Lookup(name) != nil {
				return fmt.Errorf("section %s: flag --%s is already defined", sec.Name, name)
			}
			if err := AddFlag(fs, name, sec.Name+"."+f.Key, f.Type, f.Default, sec.Name+": "+flagUsage(f)); err != nil {
				return fmt.Errorf("section %s: %w", sec.Name, err)
			}
		}
	}
	return nil
}
