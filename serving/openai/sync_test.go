package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
)

// apiSchema is testdata/weight_sync_api.json: the published request and
// response schemas of vLLM's runtime LoRA API and SGLang's
// update_weights_from_disk.
type apiSchema struct {
	Requests map[string]struct {
		Method, Path string
		Fields       map[string]fieldSchema
	}
	Responses map[string]struct{ Fields map[string]fieldSchema }
}

type fieldSchema struct {
	Type     []string
	Required bool
}

func loadSchema(t *testing.T) apiSchema {
	t.Helper()
	b, err := os.ReadFile("testdata/weight_sync_api.json")
	if err != nil {
		t.Fatal(err)
	}
	var s apiSchema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// jsonType is the JSON type of a decoded value.
func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64:
		if x == float64(int64(x)) {
			return "integer"
		}
		return "number"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

// validate checks a JSON object against a schema's fields: every key is a
// published field of a published type, every required field is there.
func validate(obj map[string]any, fields map[string]fieldSchema) []string {
	var problems []string
	for k, v := range obj {
		f, ok := fields[k]
		if !ok {
			problems = append(problems, fmt.Sprintf("field %q is not in the published schema", k))
			continue
		}
		typ := jsonType(v)
		match := false
		for _, want := range f.Type {
			match = match || want == typ
		}
		if !match {
			problems = append(problems, fmt.Sprintf("field %q is a %s, the schema says %v", k, typ, f.Type))
		}
	}
	for k, f := range fields {
		if _, ok := obj[k]; f.Required && !ok {
			problems = append(problems, fmt.Sprintf("required field %q is missing", k))
		}
	}
	sort.Strings(problems)
	return problems
}

// TestWeightSyncRequestsMatchThePublishedSchemas sends every weight-sync
// request the client makes to a recording server and validates method,
// path, content type and body against the schemas vLLM and SGLang publish.
func TestWeightSyncRequestsMatchThePublishedSchemas(t *testing.T) {
	schema := loadSchema(t)
	type seen struct {
		method, path, ctype string
		body                map[string]any
	}
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var obj map[string]any
		if err := json.Unmarshal(b, &obj); err != nil {
			t.Errorf("%s %s: body %q is not a JSON object: %v", r.Method, r.URL.Path, b, err)
		}
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.Path, r.Header.Get("Content-Type"), obj})
		mu.Unlock()
		if r.URL.Path == UpdateWeightsFromDiskPath {
			_, _ = w.Write([]byte(`{"success": true, "message": "Succeeded to update model weights.", "num_paused_requests": 0}`))
			return
		}
		_, _ = w.Write([]byte("Success"))
	}))
	defer srv.Close()
	c, err := New(Config{Endpoints: []string{srv.URL}, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	ep := c.Endpoints()[0]
	ctx := context.Background()
	for _, err := range []error{
		c.LoadLoRAAdapter(ctx, ep, "run-policy-step-000001", "/sync/policy/step-000001"),
		c.UnloadLoRAAdapter(ctx, ep, "run-policy-step-000000"),
		c.UpdateWeightsFromDisk(ctx, ep, "/sync/policy/step-000001", "run-policy-step-000001"),
		c.UpdateWeightsFromDisk(ctx, ep, "/sync/policy/step-000002", ""),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	order := []string{"vllm.LoadLoRAAdapterRequest", "vllm.UnloadLoRAAdapterRequest", "sglang.UpdateWeightFromDiskReqInput", "sglang.UpdateWeightFromDiskReqInput"}
	if len(got) != len(order) {
		t.Fatalf("%d requests, want %d", len(got), len(order))
	}
	for i, name := range order {
		want, ok := schema.Requests[name]
		if !ok {
			t.Fatalf("schema %s missing from testdata", name)
		}
		g := got[i]
		if g.method != want.Method || g.path != want.Path || !strings.HasPrefix(g.ctype, "application/json") {
			t.Errorf("%s: sent %s %s (%s), want %s %s (application/json)", name, g.method, g.path, g.ctype, want.Method, want.Path)
		}
		for _, p := range validate(g.body, want.Fields) {
			t.Errorf("%s: %s (body %v)", name, p, g.body)
		}
	}
	// The answer evolm reads must be the published one.
	var ans map[string]any
	b, _ := json.Marshal(UpdateWeightsFromDiskResponse{Success: true, Message: "ok"})
	_ = json.Unmarshal(b, &ans)
	for _, p := range validate(ans, schema.Responses["sglang.UpdateWeightFromDiskReqOutput"].Fields) {
		t.Errorf("UpdateWeightsFromDiskResponse: %s", p)
	}
}

// TestValidateCatchesSchemaViolations shows the check can fail: a
// misspelled field, a wrong type and a missing required field are each
// reported.
func TestValidateCatchesSchemaViolations(t *testing.T) {
	schema := loadSchema(t)
	fields := schema.Requests["vllm.LoadLoRAAdapterRequest"].Fields
	got := validate(map[string]any{"lora_nam": "x", "lora_path": 3.0}, fields)
	want := []string{
		`field "lora_nam" is not in the published schema`,
		`field "lora_path" is a integer, the schema says [string]`,
		`required field "lora_name" is missing`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestSyncErrorsCarryTheServersMessage: a refused load (vLLM's nested and
// pre-0.10.1 flat error bodies) and an SGLang update with success false are
// errors that quote the server.
func TestSyncErrorsCarryTheServersMessage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1" + LoadLoRAAdapterPath:
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error": {"message": "The lora adapter 'a' has already been loaded.", "type": "InvalidUserInput", "param": null, "code": 400}}`))
		case "/v1" + UnloadLoRAAdapterPath:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"object": "error", "message": "The lora adapter 'b' cannot be found.", "type": "NotFoundError", "param": null, "code": 404}`))
		default:
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"success": false, "message": "Failed to update weights: no such file.\nRolling back to original weights.", "num_paused_requests": 0}`))
		}
	}))
	defer srv.Close()
	c, err := New(Config{Endpoints: []string{srv.URL}, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	ep, ctx := c.Endpoints()[0], context.Background()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{c.LoadLoRAAdapter(ctx, ep, "a", "/p"), "HTTP 400: The lora adapter 'a' has already been loaded."},
		{c.UnloadLoRAAdapter(ctx, ep, "b"), "HTTP 404: The lora adapter 'b' cannot be found."},
		{c.UpdateWeightsFromDisk(ctx, ep, "/p", ""), "Failed to update weights: no such file."},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("error %v, want one containing %q", tc.err, tc.want)
		}
	}
}
