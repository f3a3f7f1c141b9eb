package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// maxBody bounds a PUT body: a Set is a few dozen bytes.
const maxBody = 1 << 16

// Handler serves the faults over HTTP (the backend's /admin/faults):
//
//	GET     the active faults as a JSON Set
//	PUT     replace them with the JSON Set in the body (fields left out: off;
//	        unknown fields refused), answer the new Set
//	DELETE  clear them all, answer the (empty) Set
//
// Bad bodies and values get 400 with {"error": "..."} naming what is allowed,
// and change nothing; a socket that cannot be reopened gets 500.
func (j *Injector) Handler() http.Handler { return http.HandlerFunc(j.serveHTTP) }

func (j *Injector) serveHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPut:
		s, err := decodeSet(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		if err := j.Set(s); err != nil {
			code := http.StatusInternalServerError
			if s.Validate() != nil {
				code = http.StatusBadRequest
			}
			writeJSON(w, code, map[string]string{"error": err.Error()})
			return
		}
	case http.MethodDelete:
		if err := j.Clear(); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": fmt.Sprintf("method %s; allowed: GET, PUT, DELETE", r.Method)})
		return
	}
	writeJSON(w, http.StatusOK, j.Get())
}

// decodeSet reads one JSON Set, refusing unknown fields and trailing data.
// jsonFields are Set's JSON fields: Kinds, but slowshare is slow_share.
const jsonFields = "refuse, reset, hang, slow, fail, malformed, shared, slow_share"

func decodeSet(body io.Reader) (Set, error) {
	var s Set
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Set{}, fmt.Errorf("faults: body: %v; want a JSON object with the fields %s (all optional)", err, jsonFields)
	}
	if dec.More() {
		return Set{}, fmt.Errorf("faults: body: data after the JSON object")
	}
	return s, s.Validate()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
