package main

// The REST door: TensorFlow Serving's REST API (predict, model status, metadata) and
// tfkube's readiness path, on net/http.

import (
	"crypto/subtle"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
)

// ReadyPath tells readiness without the secret (tfkube.contract.SERVING_READY_PATH).
const ReadyPath = "/tfkube/ready"

// PendingBodies: the REST door holds at most this many --max_request_bytes of bodies.
const PendingBodies = 4

var (
	predictPath = regexp.MustCompile(`(?i)^/v1/models/([^/:]+)(?:/versions/(\d+)|/labels/([^/:]+))?:(classify|regress|predict)$`)
	statusPath  = regexp.MustCompile(`(?i)^/v1/models/([^/:]+)(?:/versions/(\d+)|/labels/([^/:]+))?(/metadata)?$`)
)

// REST is the REST door's handler.
type REST struct {
	*Server
	Token     string
	GRPCReady func() string // "" when ready, else why not (nil: no gRPC door)
	held      atomic.Int64
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeError(w http.ResponseWriter, err error) {
	se := asServing(err)
	writeJSON(w, se.HTTPStatus(), errorBody(se.Message))
}

func (h *REST) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if path == ReadyPath && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		h.ready(w)
		return
	}
	if h.Token != "" {
		sent := r.Header.Get("Authorization")
		if subtle.ConstantTimeCompare([]byte(sent), []byte("Bearer "+h.Token)) != 1 {
			writeJSON(w, 401, errorBody("a valid token is required"))
			return
		}
	}
	if len(path) < 4 || path[:4] != "/v1/" {
		writeJSON(w, 404, errorBody("Not found: "+path))
		return
	}
	defer func() {
		if p := recover(); p != nil {
			log.Printf("request %s %s failed: %v", r.Method, path, p)
			writeJSON(w, 500, errorBody(shortened("panic: "+jsonText(p))))
		}
	}()
	status, body, err := h.answer(r, path)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, status, body)
	ReleaseAnswer(body)
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func optionalVersion(text string) *int64 {
	if text == "" {
		return nil
	}
	v, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return nil
	}
	return &v
}

func (h *REST) answer(r *http.Request, path string) (int, []byte, error) {
	malformed := invalid("Malformed request: %s %s", r.Method, path)
	switch r.Method {
	case http.MethodPost:
		m := predictPath.FindStringSubmatch(path)
		if m == nil {
			return 0, nil, malformed
		}
		if verb := m[4]; verb != "predict" && verb != "PREDICT" && !equalFold(verb, "predict") {
			return 0, nil, newError(CodeUnimplemented, "only :predict is served over REST here, not :%s (Classify and Regress are served over gRPC)", verb)
		}
		return h.predict(r, m[1], optionalVersion(m[2]), m[3])
	case http.MethodGet:
		m := statusPath.FindStringSubmatch(path)
		if m == nil {
			return 0, nil, malformed
		}
		model, version, label := m[1], optionalVersion(m[2]), m[3]
		if m[4] == "" {
			body, err := h.status(model, version, label)
			return 200, body, err
		}
		sv, release, err := h.Store.Acquire(model, version, label)
		if err != nil {
			return 0, nil, err
		}
		defer release()
		return 200, metadataJSON(h.Store.Name, sv), nil
	}
	return 0, nil, malformed
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i]|0x20, b[i]|0x20
		if x != y {
			return false
		}
	}
	return true
}

func (h *REST) tooLarge() *ServingError {
	return &ServingError{Code: CodeResourceExhausted, Status: 413, Message: "the request body is over " +
		strconv.Itoa(h.MaxRequestBytes) + " bytes, the most this model server reads (--max_request_bytes)"}
}

func (h *REST) take(size int64) error {
	total := int64(PendingBodies * h.MaxRequestBytes)
	if held := h.held.Add(size); held > total {
		h.held.Add(-size)
		return newError(CodeResourceExhausted, "the model server holds %d bytes of request bodies already; %d more would pass its %d (%d x --max_request_bytes): try again", held-size, size, total, PendingBodies)
	}
	return nil
}

func (h *REST) predict(r *http.Request, model string, version *int64, label string) (int, []byte, error) {
	sv, release, err := h.Store.Acquire(model, version, label)
	if err != nil {
		return 0, nil, err
	}
	defer release()
	limit := int64(h.MaxRequestBytes)
	if r.ContentLength > limit {
		return 0, nil, h.tooLarge()
	}
	size := r.ContentLength
	if size < 0 {
		size = limit
	}
	if err := h.take(size); err != nil {
		return 0, nil, err
	}
	defer h.held.Add(-size)
	var body []byte
	// keep: the body's bytes may live on (string values point into them), not reused
	keep := true
	if r.ContentLength >= 0 { // declared: read into a buffer of its size at once
		body = bodyBuffer(int(r.ContentLength))
		defer func() {
			if !keep {
				releaseBody(body)
			}
		}()
		keep = false
		_, err = io.ReadFull(r.Body, body)
	} else {
		body, err = io.ReadAll(io.LimitReader(r.Body, limit+1))
	}
	if err != nil {
		return 0, nil, invalid("reading the request body: %v", err)
	}
	if int64(len(body)) > limit {
		return 0, nil, h.tooLarge()
	}
	request, err := ParsePredict(body, sv.Model.Signatures, h.MaxElements, h.Bounds)
	if err != nil {
		return 0, nil, err
	}
	keep = keep || !bodyFree(request.Inputs)
	sig := sv.Model.Signatures[request.Signature]
	outputs, err := h.Run(sv, request.Signature, sig, request.Inputs)
	if err != nil {
		return 0, nil, err
	}
	answer, err := PredictAnswer(outputs, request.RowFormat)
	return 200, answer, err
}

// bodyPool keeps request-body buffers of up to pooledBody bytes for later requests: a
// batch-64 body is ~80 KB, otherwise allocated for each request and then collected (the
// garbage collector took 4-6% of the server's CPU in a benchmark run).
var bodyPool sync.Pool

const pooledBody = 1 << 20

// bodyBuffer is n bytes to read a body into, a pooled buffer when one is big enough.
func bodyBuffer(n int) []byte {
	if n <= pooledBody {
		if b, ok := bodyPool.Get().(*[]byte); ok && cap(*b) >= n {
			return (*b)[:n]
		}
	}
	return make([]byte, n)
}

// releaseBody hands a body's buffer back once nothing points into it.
func releaseBody(b []byte) {
	if cap(b) <= pooledBody {
		bodyPool.Put(&b)
	}
}

// bodyFree tells whether read inputs are free of the body's bytes: numbers are copied
// out of it, strings are not.
func bodyFree(inputs map[string]*Tensor) bool {
	for _, t := range inputs {
		if t.DType == DTString {
			return false
		}
	}
	return true
}

type statusEntry struct {
	Version string `json:"version"`
	State   string `json:"state"`
	Status  struct {
		ErrorCode    string `json:"error_code"`
		ErrorMessage string `json:"error_message"`
	} `json:"status"`
}

// chosenStatuses is the versions a status call names (NOT_FOUND when none).
func (s *Server) chosenStatuses(model string, version *int64, label string) ([]VersionStatus, error) {
	if model != s.Store.Name {
		return nil, notFound(model, version)
	}
	if label != "" {
		v, err := s.Store.Resolve(nil, label)
		if err != nil {
			return nil, err
		}
		version = &v
	}
	var chosen []VersionStatus
	for _, st := range s.Store.Statuses() {
		if version == nil || st.Version == *version {
			chosen = append(chosen, st)
		}
	}
	if len(chosen) == 0 {
		if version == nil {
			return nil, newError(CodeNotFound, "Could not find any versions of model %s", model)
		}
		return nil, newError(CodeNotFound, "Could not find version %d of model %s", *version, model)
	}
	sortStatuses(chosen)
	return chosen, nil
}

func (h *REST) status(model string, version *int64, label string) ([]byte, error) {
	chosen, err := h.chosenStatuses(model, version, label)
	if err != nil {
		return nil, err
	}
	entries := make([]statusEntry, len(chosen))
	for i, st := range chosen {
		entries[i].Version = strconv.FormatInt(st.Version, 10)
		entries[i].State = st.State
		entries[i].Status.ErrorCode = st.ErrorCode
		entries[i].Status.ErrorMessage = st.ErrorMessage
	}
	return json.Marshal(map[string]any{"model_version_status": entries})
}

func sortStatuses(s []VersionStatus) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Version > s[j-1].Version; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

type dimJSON struct {
	Size string `json:"size"`
	Name string `json:"name"`
}

type shapeJSON struct {
	Dim         []dimJSON `json:"dim"`
	UnknownRank bool      `json:"unknown_rank"`
}

type tensorInfoJSON struct {
	DType       string    `json:"dtype"`
	TensorShape shapeJSON `json:"tensor_shape"`
	Name        string    `json:"name"`
}

type signatureJSON struct {
	Inputs     map[string]tensorInfoJSON `json:"inputs"`
	Outputs    map[string]tensorInfoJSON `json:"outputs"`
	MethodName string                    `json:"method_name"`
	Defaults   map[string]any            `json:"defaults"`
}

func infoJSON(infos map[string]*TensorInfo) map[string]tensorInfoJSON {
	out := map[string]tensorInfoJSON{}
	for k, info := range infos {
		shape := shapeJSON{Dim: []dimJSON{}, UnknownRank: !info.KnownRank}
		if info.KnownRank {
			for _, d := range info.Shape {
				shape.Dim = append(shape.Dim, dimJSON{Size: strconv.FormatInt(d, 10)})
			}
		}
		out[k] = tensorInfoJSON{DType: info.DType.String(), TensorShape: shape, Name: info.TensorName}
	}
	return out
}

func metadataJSON(model string, sv *Servable) []byte {
	sigs := map[string]signatureJSON{}
	for name, sig := range sv.Model.Signatures {
		sigs[name] = signatureJSON{infoJSON(sig.Inputs), infoJSON(sig.Outputs), sig.MethodName, map[string]any{}}
	}
	body, _ := json.Marshal(map[string]any{
		"model_spec": map[string]string{"name": model, "signature_name": "", "version": strconv.FormatInt(sv.Version, 10)},
		"metadata":   map[string]any{"signature_def": map[string]any{"signature_def": sigs}},
	})
	return body
}

func (h *REST) ready(w http.ResponseWriter) {
	why := ""
	if _, ok := h.Store.ServingVersion(); !ok {
		why = "no version is available yet"
	} else if h.GRPCReady != nil {
		why = h.GRPCReady()
	}
	if why == "" {
		writeJSON(w, 200, []byte(`{"ready":true}`))
		return
	}
	writeJSON(w, 503, errorBody(why))
}
