package pipeline

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// A section's keys can be declared once, as the fields of a Go struct whose
// tags hold each key's name, default, bounds and help (TRL's GRPOConfig
// dataclass is the model): FieldsOf turns the struct into the section's
// Fields, Bind fills the struct from a loaded config, and nothing else
// lists the keys.
//
//	type Keys struct {
//		Steps int     `key:"steps" default:"200" min:"1" help:"total training steps"`
//		LR    float64 `key:"lr" default:"1e-6" gt:"0" help:"AdamW learning rate"`
//		Norm  Norm    `key:"loss_norm" default:"grpo" help:"…"` // Norm has Enum() []string
//	}
//
// Tags:
//
//	key       the key (required; fields without it are skipped)
//	default   the default, as a config file would write it (lists comma-separated)
//	min, max  inclusive bounds of a number or duration (in seconds)
//	gt, lt    exclusive bounds
//	enum      allowed values, comma-separated
//	help      the one-line description
//	example   an example value, shown in docs
//	volatile  "true": the key may change between runs of a run directory (VolatileOf)
//	required  "true": the stage needs a non-empty value
//
// A field's Go type picks the key's type: string (or a named string type),
// int, int64, float64, bool, time.Duration, []string. A named string type
// with a method Enum() []string takes its allowed values from it, each time
// the fields are built: an enum that a registry fills (rewards by name).
//
// An embedded struct (an anonymous field of struct type) without a key tag
// contributes its own tagged fields, in place: keys that several sections
// share (the trackers' keys, track.Keys) are declared once and embedded
// in each section's struct.
type enumer interface{ Enum() []string }

// embedded reports whether sf is a struct embedded without a key tag, whose
// fields are the section's own.
func embedded(sf reflect.StructField) bool {
	return sf.Anonymous && sf.Type.Kind() == reflect.Struct && sf.Tag.Get("key") == ""
}

var durationType = reflect.TypeOf(time.Duration(0))

// FieldsOf returns the Fields that the tags of the struct v (or *v) declare,
// in field order.
func FieldsOf(v any) ([]Field, error) {
	t := reflect.TypeOf(v)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("FieldsOf: %v is not a struct", t)
	}
	out, err := fieldsOf(t, nil)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, f := range out {
		if seen[f.Key] {
			return nil, fmt.Errorf("FieldsOf: %v declares key %q twice (an embedded struct's key and its own?)", t, f.Key)
		}
		seen[f.Key] = true
	}
	return out, nil
}

// fieldsOf appends the fields of struct type t to out, recursing into
// embedded structs.
func fieldsOf(t reflect.Type, out []Field) ([]Field, error) {
	for i := range t.NumField() {
		sf := t.Field(i)
		if embedded(sf) {
			var err error
			if out, err = fieldsOf(sf.Type, out); err != nil {
				return nil, err
			}
			continue
		}
		key := sf.Tag.Get("key")
		if key == "" {
			continue
		}
		f, err := fieldOf(sf)
		if err != nil {
			return nil, fmt.Errorf("%s.%s (key %q): %w", t.Name(), sf.Name, key, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// VolatileOf returns the keys of v's fields tagged volatile:"true".
func VolatileOf(v any) []string {
	t := reflect.TypeOf(v)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	for i := range t.NumField() {
		sf := t.Field(i)
		if embedded(sf) {
			out = append(out, VolatileOf(reflect.Zero(sf.Type).Interface())...)
			continue
		}
		if k := sf.Tag.Get("key"); k != "" && sf.Tag.Get("volatile") == "true" {
			out = append(out, k)
		}
	}
	return out
}

func fieldOf(sf reflect.StructField) (Field, error) {
	tag := sf.Tag
	f := Field{Key: tag.Get("key"), Description: tag.Get("help"), Required: tag.Get("required") == "true"}
	switch {
	case sf.Type == durationType:
		f.Type = TypeDuration
	case sf.Type.Kind() == reflect.String:
		f.Type = TypeString
	case sf.Type.Kind() == reflect.Int || sf.Type.Kind() == reflect.Int64:
		f.Type = TypeInt
	case sf.Type.Kind() == reflect.Float64:
		f.Type = TypeFloat
	case sf.Type.Kind() == reflect.Bool:
		f.Type = TypeBool
	case sf.Type.Kind() == reflect.Slice && sf.Type.Elem().Kind() == reflect.String:
		f.Type = TypeStrings
	default:
		return f, fmt.Errorf("type %v has no config type", sf.Type)
	}
	if f.Description == "" {
		return f, fmt.Errorf("no help")
	}
	def, err := parseDefault(f.Type, tag.Get("default"))
	if err != nil {
		return f, fmt.Errorf("default: %w", err)
	}
	f.Default = def
	if ex := tag.Get("example"); ex != "" {
		if f.Example, err = parseDefault(f.Type, ex); err != nil {
			return f, fmt.Errorf("example: %w", err)
		}
	}
	if e := tag.Get("enum"); e != "" {
		f.Enum = splitList(e)
	} else if en, ok := reflect.Zero(sf.Type).Interface().(enumer); ok {
		f.Enum = en.Enum()
	}
	bound := func(name string) (*float64, error) {
		s := tag.Get(name)
		if s == "" {
			return nil, nil
		}
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", name, s, err)
		}
		return &x, nil
	}
	for _, b := range []struct {
		name      string
		dst       **float64
		exclusive *bool
	}{{"min", &f.Min, nil}, {"gt", &f.Min, &f.ExclusiveMin}, {"max", &f.Max, nil}, {"lt", &f.Max, &f.ExclusiveMax}} {
		x, err := bound(b.name)
		if err != nil {
			return f, err
		}
		if x == nil {
			continue
		}
		if *b.dst != nil {
			return f, fmt.Errorf("both %s and its exclusive or inclusive twin", b.name)
		}
		*b.dst = x
		if b.exclusive != nil {
			*b.exclusive = true
		}
	}
	return f, nil
}

// parseDefault reads a tag's default as a config file's value of type t.
func parseDefault(t FieldType, s string) (any, error) {
	switch t {
	case TypeString:
		return s, nil
	case TypeStrings:
		return splitList(s), nil
	case TypeDuration:
		if s == "" {
			return "0s", nil
		}
		return s, nil
	case TypeInt, TypeFloat, TypeBool:
		if s == "" {
			s = map[FieldType]string{TypeInt: "0", TypeFloat: "0", TypeBool: "false"}[t]
		}
		v, err := coerce(t, s)
		if err != nil {
			return nil, err
		}
		return v, nil
	}
	return nil, fmt.Errorf("unknown type %s", t)
}

// Bind sets the tagged fields of the struct dst points to from cfg's values
// (cfg is the section's view: the values FieldsOf's keys name, already
// coerced and checked by the loader).
func Bind(cfg *Config, dst any) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("Bind: want a pointer to a struct, got %T", dst)
	}
	return bind(cfg, v.Elem())
}

// bind sets the tagged fields of the struct value v, recursing into
// embedded structs.
func bind(cfg *Config, v reflect.Value) error {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if embedded(sf) {
			if err := bind(cfg, v.Field(i)); err != nil {
				return err
			}
			continue
		}
		key := sf.Tag.Get("key")
		if key == "" {
			continue
		}
		fv := v.Field(i)
		raw := cfg.Get(key)
		if raw == nil {
			return fmt.Errorf("config key %s: not in this config (is %s.%s registered?)", strings.TrimSuffix(cfg.prefix, ".")+"."+key, t.Name(), sf.Name)
		}
		rv := reflect.ValueOf(raw)
		switch {
		case rv.Type().ConvertibleTo(fv.Type()):
			fv.Set(rv.Convert(fv.Type()))
		default:
			return fmt.Errorf("config key %s: a %T does not fit %s.%s (%v)", key, raw, t.Name(), sf.Name, fv.Type())
		}
	}
	return nil
}
