package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/evolm/evolm/pipeline"
)

// Keys shared by two sections, declared once (as track.Keys is).
type testSharedKeys struct {
	Names   []string      `key:"names" default:"a,b" volatile:"true" help:"names"`
	Timeout time.Duration `key:"timeout" default:"2m" min:"0" help:"timeout"`
}

type testOwnKeys struct {
	Steps int `key:"steps" default:"3" min:"1" volatile:"true" help:"steps"`
	testSharedKeys
	LR float64 `key:"lr" default:"0.5" gt:"0" help:"lr"`
}

func init() {
	pipeline.Register(pipeline.Spec{
		Name: "testembed", Summary: "embeds shared keys",
		FieldsFunc: func() ([]pipeline.Field, error) { return pipeline.FieldsOf(testOwnKeys{}) },
		Volatile:   pipeline.VolatileOf(testOwnKeys{}),
		New: func(cfg *pipeline.Config) (pipeline.Stage, error) {
			return pipeline.StageFunc(func(context.Context, *pipeline.Env) error { return nil }), nil
		},
	})
}

// TestBindEmbedded: the tagged fields of an embedded struct without a key
// tag are the section's own keys, in place (FieldsOf), volatile as tagged
// (VolatileOf), and filled by Bind; a key declared twice is refused.
func TestBindEmbedded(t *testing.T) {
	fields, err := pipeline.FieldsOf(testOwnKeys{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, f := range fields {
		keys = append(keys, f.Key)
	}
	if d := cmp.Diff([]string{"steps", "names", "timeout", "lr"}, keys); d != "" {
		t.Errorf("FieldsOf keys (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"steps", "names"}, pipeline.VolatileOf(&testOwnKeys{})); d != "" {
		t.Errorf("VolatileOf (-want +got):\n%s", d)
	}
	cfg, err := pipeline.StageConfig("testembed", map[string]any{"names": []string{"x"}, "timeout": "5s"})
	if err != nil {
		t.Fatal(err)
	}
	var k testOwnKeys
	if err := pipeline.Bind(cfg, &k); err != nil {
		t.Fatal(err)
	}
	want := testOwnKeys{Steps: 3, LR: 0.5, testSharedKeys: testSharedKeys{Names: []string{"x"}, Timeout: 5 * time.Second}}
	if d := cmp.Diff(want, k, cmp.AllowUnexported(testOwnKeys{})); d != "" {
		t.Errorf("Bind (-want +got):\n%s", d)
	}
	type twice struct {
		testSharedKeys
		Again int `key:"timeout" help:"again"`
	}
	if _, err := pipeline.FieldsOf(twice{}); err == nil || !strings.Contains(err.Error(), `"timeout" twice`) {
		t.Errorf("a key declared twice: error %v", err)
	}
}
