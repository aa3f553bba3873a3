package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"
	"time"
)

// readBody reads a POST body: it must be declared application/json (415
// otherwise, before it is read: a page in a browser cannot send that
// cross-origin without a preflight), hold at most MaxBodyBytes (413) and
// arrive within BodyTimeout (408), and be one JSON value (400).
func (s *server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		w.Header().Set("Connection", "close")
		return nil, &apiError{status: http.StatusUnsupportedMediaType, typ: "invalid_request_error",
			msg: fmt.Sprintf("Content-Type %q: only application/json is accepted", r.Header.Get("Content-Type"))}
	}
	tooLarge := &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error",
		msg: fmt.Sprintf("request body exceeds the limit of %d bytes", s.cfg.MaxBodyBytes)}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		w.Header().Set("Connection", "close") // the unread body stays behind
		return nil, tooLarge
	}
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout)) == nil
	timedOut := false
	defer func() {
		// Lifted once the body is read: net/http's background read, which
		// notices a client going away, would otherwise hit it
		// mid-generation. After a timeout it stays, so that the server does
		// not wait for the rest of the body before closing.
		if deadline && !timedOut {
			_ = rc.SetReadDeadline(time.Time{})
		}
	}()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return nil, tooLarge
		case errors.Is(err, os.ErrDeadlineExceeded):
			timedOut = true
			w.Header().Set("Connection", "close")
			return nil, &apiError{status: http.StatusRequestTimeout, typ: "invalid_request_error",
				msg: fmt.Sprintf("request body not received within %v", s.cfg.BodyTimeout)}
		}
		return nil, badRequest("", "reading the body: %v", err)
	}
	// One JSON value and only whitespace after it. (dec.More would let a
	// stray '}' or ']' through: found by FuzzDecodeRequest.)
	dec := json.NewDecoder(bytes.NewReader(body))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return nil, badRequest("", "invalid JSON body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badRequest("", "invalid JSON body: trailing data after the JSON value")
	}
	return body, nil
}

// decode reads a POST body (readBody) into v.
func (s *server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return unmarshal(body, v)
}

// unmarshal decodes body into v; a field of the wrong type is a 400 that
// names it.
func unmarshal(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return badRequest(te.Field, "field %s: want %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		for prefix, param := range map[string]string{"prompt: ": "prompt", "content: ": "messages", "content part ": "messages"} {
			if strings.HasPrefix(err.Error(), prefix) {
				return badRequest(param, "%v", err)
			}
		}
		return badRequest("", "invalid JSON body: %v", err)
	}
	return nil
}
