package constrain

import (
	"bytes"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Validator checks a text against a JSON schema with
// github.com/santhosh-tekuri/jsonschema (drafts 4 to 2020-12; 2020-12 when
// the schema names none): the independent check of what a Grammar lets
// through.
type Validator struct {
	sch *jsonschema.Schema
}

// NewValidator compiles schema; an invalid schema is an error.
func NewValidator(schema []byte) (*Validator, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("evolm:schema.json", doc); err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	sch, err := c.Compile("evolm:schema.json")
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	return &Validator{sch: sch}, nil
}

// Validate parses text as one JSON value and checks it against the schema.
func (v *Validator) Validate(text string) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(text)))
	if err != nil {
		return fmt.Errorf("not a JSON value: %w", err)
	}
	return v.sch.Validate(inst)
}
