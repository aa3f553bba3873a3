package track

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

func init() { Register("mlflow", openMLflow) }

// MLflow speaks the tracking server's REST API 2.0 (`mlflow server`, or a
// managed one): runs/create once, then runs/log-batch with every metric of
// the queued steps (at most 1000 metrics and 100 tags a request, a step
// never split across requests), tags for checkpoints, params for the
// configuration, runs/update at the end. A request that fails on the
// network, a 429 or a 5xx is retried by the hub with the same timestamps,
// so a step the server took before it died is not taken twice (MLflow keeps
// one of identical rows); one refused with another 4xx is dropped.
//
// The run's id is kept in <run>/trackers/mlflow.json; a resumed run
// continues that run (runs/update RUNNING) and sends no step at or before
// the largest step the server holds for any metric. MLflow's params cannot
// change: a key whose value changed on resume (a volatile key such as
// steps) is recorded as the tag evolm.changed.<key>.
type mlflow struct {
	api       string // <tracking uri>/api/2.0/mlflow/
	auth      string // Authorization header, "" for none
	client    *http.Client
	runID     string
	delivered int64 // the last step whose events the server took
}

type mlflowState struct {
	TrackingURI  string `json:"tracking_uri"`
	ExperimentID string `json:"experiment_id"`
	RunID        string `json:"run_id"`
}

// MLflow's limits on one log-batch request and on a param value.
const (
	mlflowMaxMetrics    = 1000
	mlflowMaxParams     = 100
	mlflowMaxTags       = 100
	mlflowMaxParamValue = 6000
)

func openMLflow(ctx context.Context, s Settings, r Run) (Sink, int64, error) {
	uri := s.MLflowURI
	if uri == "" {
		uri = os.Getenv("MLFLOW_TRACKING_URI")
	}
	u, err := url.Parse(uri)
	if uri == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, 0, fmt.Errorf("mlflow_tracking_uri %q: want the http(s) URL of a tracking server (`mlflow server`); evolm speaks MLflow's REST API, not a local file or database store", uri)
	}
	m := &mlflow{api: strings.TrimSuffix(uri, "/") + "/api/2.0/mlflow/", client: &http.Client{Timeout: 30 * time.Second}, delivered: -1}
	switch {
	case os.Getenv("MLFLOW_TRACKING_TOKEN") != "":
		m.auth = "Bearer " + os.Getenv("MLFLOW_TRACKING_TOKEN")
	case os.Getenv("MLFLOW_TRACKING_USERNAME") != "":
		req, _ := http.NewRequest("GET", uri, nil)
		req.SetBasicAuth(os.Getenv("MLFLOW_TRACKING_USERNAME"), os.Getenv("MLFLOW_TRACKING_PASSWORD"))
		m.auth = req.Header.Get("Authorization")
	}
	var st mlflowState
	ok, err := loadState(r, "mlflow", &st)
	if err != nil {
		return nil, 0, err
	}
	last := int64(-1)
	params := map[string]string{}
	unreachable := func(err error) error {
		return fmt.Errorf("tracking server %s: %w (is `mlflow server` running there?)", uri, err)
	}
	if ok && st.TrackingURI == uri {
		if last, params, err = m.resume(ctx, st.RunID); err != nil {
			return nil, 0, unreachable(err)
		}
	}
	if m.runID == "" {
		if st, err = m.create(ctx, uri, s, r); err != nil {
			return nil, 0, unreachable(err)
		}
		if err := saveState(r, "mlflow", st); err != nil {
			return nil, 0, err
		}
	}
	if err := m.logParams(ctx, r, params); err != nil {
		return nil, 0, err
	}
	m.delivered = last
	return m, last, nil
}

// resume continues run id when the server still has it: it marks it
// RUNNING and returns the largest step it holds and its params.
func (m *mlflow) resume(ctx context.Context, id string) (int64, map[string]string, error) {
	var got struct {
		Run struct {
			Data struct {
				Metrics []struct {
					Step flexInt `json:"step"`
				} `json:"metrics"`
				Params []struct{ Key, Value string } `json:"params"`
			} `json:"data"`
		} `json:"run"`
	}
	err := m.call(ctx, "GET", "runs/get?run_id="+url.QueryEscape(id), nil, &got)
	var he *httpError
	if errors.As(err, &he) && he.status == http.StatusNotFound {
		return -1, nil, nil // the run was deleted: start a new one
	}
	if err != nil {
		return 0, nil, err
	}
	last := int64(-1)
	for _, x := range got.Run.Data.Metrics {
		last = max(last, int64(x.Step))
	}
	params := map[string]string{}
	for _, p := range got.Run.Data.Params {
		params[p.Key] = p.Value
	}
	m.runID = id
	return last, params, m.call(ctx, "POST", "runs/update", map[string]any{"run_id": id, "status": "RUNNING"}, nil)
}

// create makes the run in its experiment (created when missing).
func (m *mlflow) create(ctx context.Context, uri string, s Settings, r Run) (mlflowState, error) {
	name := s.MLflowExperiment
	var exp struct {
		Experiment struct {
			ID string `json:"experiment_id"`
		} `json:"experiment"`
		ID string `json:"experiment_id"`
	}
	err := m.call(ctx, "GET", "experiments/get-by-name?experiment_name="+url.QueryEscape(name), nil, &exp)
	var he *httpError
	if errors.As(err, &he) && he.status == http.StatusNotFound {
		err = m.call(ctx, "POST", "experiments/create", map[string]any{"name": name}, &exp)
		if errors.As(err, &he) && he.code == "RESOURCE_ALREADY_EXISTS" { // created meanwhile
			err = m.call(ctx, "GET", "experiments/get-by-name?experiment_name="+url.QueryEscape(name), nil, &exp)
		}
	}
	if err != nil {
		return mlflowState{}, fmt.Errorf("experiment %q: %w", name, err)
	}
	expID := exp.Experiment.ID
	if expID == "" {
		expID = exp.ID
	}
	tags := []kv{{"evolm.version", r.Version}, {"evolm.config_hash", r.ConfigHash}, {"evolm.run_dir", r.Dir}, {"mlflow.source.name", "evolm"}}
	for k, v := range s.Tags {
		tags = append(tags, kv{k, v})
	}
	var run struct {
		Run struct {
			Info struct {
				RunID string `json:"run_id"`
			} `json:"info"`
		} `json:"run"`
	}
	if err := m.call(ctx, "POST", "runs/create", map[string]any{"experiment_id": expID, "run_name": s.RunName,
		"start_time": r.Start.UnixMilli(), "tags": tags}, &run); err != nil {
		return mlflowState{}, err
	}
	m.runID = run.Run.Info.RunID
	return mlflowState{TrackingURI: uri, ExperimentID: expID, RunID: m.runID}, nil
}

// logParams logs the configuration as params: keys the run lacks; a key
// whose value changed becomes a tag.
func (m *mlflow) logParams(ctx context.Context, r Run, have map[string]string) error {
	var params, tags []kv
	for _, p := range r.Params {
		v := p.Text()
		if len(v) > mlflowMaxParamValue {
			v = v[:mlflowMaxParamValue]
		}
		old, ok := have[p.Key]
		switch {
		case !ok:
			params = append(params, kv{p.Key, v})
		case old != v:
			tags = append(tags, kv{"evolm.changed." + p.Key, v})
		}
	}
	for len(params) > 0 || len(tags) > 0 {
		np, nt := min(len(params), mlflowMaxParams), min(len(tags), mlflowMaxTags)
		if err := m.logBatch(ctx, nil, params[:np], tags[:nt]); err != nil {
			return fmt.Errorf("params: %w", err)
		}
		params, tags = params[np:], tags[nt:]
	}
	return nil
}

type kv struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// metric is one log-batch metric; its value is a JSON number, or the
// string MLflow reads for NaN and the infinities.
type metric struct {
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	Timestamp int64           `json:"timestamp"`
	Step      int64           `json:"step"`
}

func jsonFloat(v float64) json.RawMessage {
	switch {
	case math.IsNaN(v):
		return json.RawMessage(`"NaN"`)
	case math.IsInf(v, 1):
		return json.RawMessage(`"Infinity"`)
	case math.IsInf(v, -1):
		return json.RawMessage(`"-Infinity"`)
	}
	return strconv.AppendFloat(nil, v, 'g', -1, 64)
}

// Write sends the events' metrics and checkpoint tags, a request at most
// per 1000 metrics, whole steps per request. Steps the server took before
// a failed request are not sent again when the hub retries.
func (m *mlflow) Write(ctx context.Context, evs []Event) error {
	var metrics []metric
	var tags []kv
	pending := int64(-1) // the last step in metrics and tags
	flush := func() error {
		if len(metrics) == 0 && len(tags) == 0 {
			return nil
		}
		if err := m.logBatch(ctx, metrics, nil, tags); err != nil {
			return err
		}
		m.delivered = max(m.delivered, pending)
		metrics, tags = metrics[:0], tags[:0]
		return nil
	}
	for i := 0; i < len(evs); {
		step := evs[i].Step
		var sm []metric
		var st []kv
		for ; i < len(evs) && evs[i].Step == step; i++ {
			switch e := evs[i]; e.Kind {
			case Scalars:
				for _, p := range e.Points {
					sm = append(sm, metric{Key: p.Tag, Value: jsonFloat(p.Value), Timestamp: e.Time.UnixMilli(), Step: e.Step})
				}
			case Checkpoint:
				st = append(st, kv{"evolm.checkpoint." + e.Tag, e.Text}, kv{"evolm.last_checkpoint", e.Text})
			}
		}
		if step <= m.delivered {
			sm = nil // taken before; tags are set again harmlessly
			if len(st) == 0 {
				continue
			}
		}
		if len(metrics)+len(sm) > mlflowMaxMetrics || len(tags)+len(st) > mlflowMaxTags {
			if err := flush(); err != nil {
				return err
			}
		}
		metrics, tags, pending = append(metrics, sm...), append(tags, st...), max(pending, step)
	}
	return flush()
}

// logBatch sends one runs/log-batch (the server answers a null list with a
// 500: every list is sent, empty or not).
func (m *mlflow) logBatch(ctx context.Context, metrics []metric, params, tags []kv) error {
	if metrics == nil {
		metrics = []metric{}
	}
	if params == nil {
		params = []kv{}
	}
	if tags == nil {
		tags = []kv{}
	}
	return m.call(ctx, "POST", "runs/log-batch", map[string]any{"run_id": m.runID, "metrics": metrics, "params": params, "tags": tags}, nil)
}

// Close marks the run ended.
func (m *mlflow) Close(ctx context.Context, status Status) error {
	return m.call(ctx, "POST", "runs/update", map[string]any{"run_id": m.runID, "status": string(status), "end_time": time.Now().UnixMilli()}, nil)
}

// httpError is a response other than 200.
type httpError struct {
	status int
	code   string // MLflow's error_code
	msg    string
}

func (e *httpError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.status, e.code, e.msg)
}

// call sends a request to the REST API and decodes the answer into out
// (nil: ignored). A 429 or 5xx, or no answer, is an error the hub retries;
// another status is Permanent.
func (m *mlflow) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return Permanent(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, m.api+path, rd)
	if err != nil {
		return Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if m.auth != "" {
		req.Header.Set("Authorization", m.auth)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return fmt.Errorf("mlflow %s %s: %w", method, strings.SplitN(path, "?", 2)[0], err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("mlflow %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code string `json:"error_code"`
			Msg  string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		if e.Msg == "" {
			e.Msg = strings.TrimSpace(string(data[:min(len(data), 300)]))
		}
		he := &httpError{status: resp.StatusCode, code: e.Code, msg: e.Msg}
		err := fmt.Errorf("mlflow %s %s: %w", method, strings.SplitN(path, "?", 2)[0], he)
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			return err
		}
		return Permanent(err)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return Permanent(fmt.Errorf("mlflow %s %s: %w", method, path, err))
	}
	return nil
}

// flexInt is an int64 that JSON gives as a number or, as proto3's JSON
// mapping has int64, a string.
type flexInt int64

func (f *flexInt) UnmarshalJSON(b []byte) error {
	n, err := strconv.ParseInt(strings.Trim(string(b), `"`), 10, 64)
	*f = flexInt(n)
	return err
}
