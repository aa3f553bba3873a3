package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/evolm/evolm/serving/backend"
	"github.com/evolm/evolm/serving/openai"
)

// apiError is a request error with its HTTP status and OpenAI type.
type apiError struct {
	status int
	typ    string
	param  string
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: param, msg: fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, status int, typ, param, msg string) {
	ae := &apiError{status: status, typ: typ, param: param, msg: msg}
	if status == http.StatusNotFound && param == "model" {
		ae.code = "model_not_found"
	}
	writeAPIError(w, ae)
}

func writeAPIError(w http.ResponseWriter, ae *apiError) { writeJSON(w, ae.status, errorBody(ae)) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	ae := s.apiErr(r, err)
	if ae.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeAPIError(w, ae)
}

// apiErr is err as an API error, logged: its own status, 503 for an engine
// that could not run the request (out of memory, a libtorch error: it and
// the server are still up, so a retry may succeed), else 500.
func (s *server) apiErr(r *http.Request, err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
	case errors.Is(err, backend.ErrUnavailable):
		ae = &apiError{status: http.StatusServiceUnavailable, typ: "server_error", msg: err.Error()}
	default:
		ae = &apiError{status: http.StatusInternalServerError, typ: "server_error", msg: err.Error()}
	}
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "serve: request failed", slog.String("path", r.URL.Path),
		slog.Int("status", ae.status), slog.String("error", ae.msg))
	return ae
}

// errorBody is ae in OpenAI's error shape.
func errorBody(ae *apiError) openai.ErrorBody {
	body := openai.ErrorBody{Error: openai.ErrorDetail{Message: ae.msg, Type: ae.typ}}
	if ae.param != "" {
		body.Error.Param = &ae.param
	}
	if ae.code != "" {
		body.Error.Code = &ae.code
	}
	return body
}
