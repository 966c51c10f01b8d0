package main

// The model's versions: a poll of the base path loads the versions the policy wants
// (warmed up from assets.extra/tf_serving_warmup_requests), unloads the others once a
// wanted one is up; a request's version comes from its version, its label, or the
// traffic split between labels.

import (
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Policy is TensorFlow Serving's model_version_policy.
type Policy struct {
	Specific []int64
	Latest   int
	All      bool
}

// ParsePolicy reads latest, latest:N, all, specific:V[,V...] or a bare version.
func ParsePolicy(text string) (Policy, error) {
	kind, rest, _ := strings.Cut(strings.TrimSpace(text), ":")
	kind = strings.ToLower(strings.TrimSpace(kind))
	if v, err := strconv.ParseInt(kind, 10, 64); err == nil && rest == "" && v >= 0 {
		return Policy{Specific: []int64{v}}, nil
	}
	switch kind {
	case "latest":
		n := 1
		if strings.TrimSpace(rest) != "" {
			var err error
			n, err = strconv.Atoi(strings.TrimSpace(rest))
			if err != nil || n < 1 {
				return Policy{}, fmt.Errorf("latest:N needs N >= 1")
			}
		}
		return Policy{Latest: n}, nil
	case "all":
		if strings.TrimSpace(rest) == "" {
			return Policy{All: true}, nil
		}
	case "specific":
		seen := map[int64]bool{}
		var versions []int64
		for _, part := range strings.Split(rest, ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			v, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
			if err != nil || v < 0 {
				return Policy{}, fmt.Errorf("specific:V[,V...] needs at least one version")
			}
			if !seen[v] {
				seen[v] = true
				versions = append(versions, v)
			}
		}
		if len(versions) == 0 {
			return Policy{}, fmt.Errorf("specific:V[,V...] needs at least one version")
		}
		sort.Slice(versions, func(a, b int) bool { return versions[a] < versions[b] })
		return Policy{Specific: versions}, nil
	}
	return Policy{}, fmt.Errorf("%q: expected latest, latest:N, all or specific:V[,V...]", text)
}

// Serve is the versions to serve now, newest first.
func (p Policy) Serve(available []int64) []int64 {
	seen := map[int64]bool{}
	var ordered []int64
	for _, v := range available {
		if !seen[v] {
			seen[v] = true
			ordered = append(ordered, v)
		}
	}
	sort.Slice(ordered, func(a, b int) bool { return ordered[a] > ordered[b] })
	if p.All {
		return ordered
	}
	if len(p.Specific) > 0 {
		var out []int64
		for _, v := range ordered {
			for _, s := range p.Specific {
				if v == s {
					out = append(out, v)
				}
			}
		}
		return out
	}
	n := max(p.Latest, 1)
	if len(ordered) > n {
		ordered = ordered[:n]
	}
	return ordered
}

// Describe is the policy in the start-up line's words.
func (p Policy) Describe() string {
	if p.All {
		return "all"
	}
	if len(p.Specific) > 0 {
		parts := make([]string, len(p.Specific))
		for i, v := range p.Specific {
			parts[i] = strconv.FormatInt(v, 10)
		}
		return strings.Join(parts, ",")
	}
	if p.Latest <= 1 {
		return "latest"
	}
	return fmt.Sprintf("latest %d", p.Latest)
}

// PlanVersions is (what to load, newest first; what to unload) to go from loaded to
// wanted: a version is unloaded only once a wanted one is loaded.
func PlanVersions(wanted []int64, loaded, failed map[int64]bool) (load, unload []int64) {
	want := map[int64]bool{}
	for _, v := range wanted {
		want[v] = true
	}
	sorted := append([]int64(nil), wanted...)
	sort.Slice(sorted, func(a, b int) bool { return sorted[a] > sorted[b] })
	for _, v := range sorted {
		if !loaded[v] && !failed[v] {
			load = append(load, v)
		}
	}
	anyWanted := false
	var up []int64
	for v := range loaded {
		up = append(up, v)
		if want[v] {
			anyWanted = true
		}
	}
	sort.Slice(up, func(a, b int) bool { return up[a] > up[b] })
	if anyWanted {
		for _, v := range up {
			if !want[v] {
				unload = append(unload, v)
			}
		}
	} else if len(up) > 1 {
		unload = up[1:]
	}
	sort.Slice(unload, func(a, b int) bool { return unload[a] < unload[b] })
	return load, unload
}

// ParsePairs reads name=number[,name=number].
func ParsePairs(text, what string) (map[string]int64, error) {
	pairs := map[string]int64{}
	for _, part := range strings.Split(text, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		key, value, ok := strings.Cut(part, "=")
		key = strings.TrimSpace(key)
		v, err := strconv.ParseUint(strings.TrimSpace(value), 10, 63)
		if !ok || key == "" || err != nil {
			return nil, fmt.Errorf("%q: expected %s as name=number", strings.TrimSpace(part), what)
		}
		if _, dup := pairs[key]; dup {
			return nil, fmt.Errorf("%q is given twice", key)
		}
		pairs[key] = int64(v)
	}
	return pairs, nil
}

// SplitLabel is the label a request naming neither version nor label goes to, for a
// draw in [0, 1); "" when no split applies.
func SplitLabel(weights, labels map[string]int64, available map[int64]bool, draw float64) string {
	var live []string
	total := int64(0)
	for _, k := range sortedKeys(weights) {
		v, ok := labels[k]
		if weights[k] > 0 && ok && available[v] {
			live = append(live, k)
			total += weights[k]
		}
	}
	if total <= 0 {
		return ""
	}
	point := draw * float64(total)
	for _, k := range live {
		if point < float64(weights[k]) {
			return k
		}
		point -= float64(weights[k])
	}
	return live[len(live)-1]
}

// ExportedVersions is the numbered folders below base.
func ExportedVersions(base string) []int64 {
	entries, err := os.ReadDir(base)
	if err != nil {
		return nil
	}
	var out []int64
	for _, e := range entries {
		name := e.Name()
		if name == "" || strings.Trim(name, "0123456789") != "" {
			continue
		}
		v, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			continue
		}
		info, err := os.Stat(filepath.Join(base, name))
		if err != nil || !info.IsDir() {
			continue
		}
		if !hasSavedModel(filepath.Join(base, name)) {
			continue
		}
		out = append(out, v)
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out
}

func hasSavedModel(dir string) bool {
	for _, f := range []string{"saved_model.pb", "saved_model.pbtxt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return true
		}
	}
	return false
}

// VersionStatus is one version's state (START, LOADING, AVAILABLE, UNLOADING, END).
type VersionStatus struct {
	Version      int64
	State        string
	ErrorCode    string
	ErrorMessage string
}

// Servable is a loaded version and the calls running on it.
type Servable struct {
	Version int64
	Model   *Model
	running sync.WaitGroup
}

// Store holds the served versions.
type Store struct {
	Name    string
	Base    string
	Policy  Policy
	Labels  map[string]int64
	Traffic map[string]int64
	Load    func(path string, version int64) (*Servable, int, error)

	mu     sync.Mutex
	served map[int64]*Servable
	states map[int64]VersionStatus
	draw   func() float64
}

// NewStore makes a store; Load loads (and warms up) a version.
func NewStore(name, base string, policy Policy, labels, traffic map[string]int64, load func(string, int64) (*Servable, int, error)) *Store {
	return &Store{
		Name: name, Base: base, Policy: policy, Labels: labels, Traffic: traffic, Load: load,
		served: map[int64]*Servable{}, states: map[int64]VersionStatus{}, draw: rand.Float64,
	}
}

func (s *Store) failed() map[int64]bool {
	out := map[int64]bool{}
	for v, st := range s.states {
		if st.State == "END" && st.ErrorMessage != "" {
			out[v] = true
		}
	}
	return out
}

func (s *Store) loadedSet() map[int64]bool {
	out := map[int64]bool{}
	for v := range s.served {
		out[v] = true
	}
	return out
}

// Poll looks at the base path once.
func (s *Store) Poll() {
	wanted := s.Policy.Serve(ExportedVersions(s.Base))
	s.mu.Lock()
	load, _ := PlanVersions(wanted, s.loadedSet(), s.failed())
	s.mu.Unlock()
	for _, v := range load {
		s.load(v)
	}
	s.mu.Lock()
	_, unload := PlanVersions(wanted, s.loadedSet(), s.failed())
	for _, v := range unload {
		gone := s.served[v]
		delete(s.served, v)
		s.states[v] = VersionStatus{Version: v, State: "END", ErrorCode: "OK"}
		log.Printf("unloaded version %d of %s", v, s.Name)
		go func() { // the session closes once the calls on it are done
			gone.running.Wait()
			gone.Model.Close()
		}()
	}
	s.mu.Unlock()
}

func (s *Store) load(v int64) {
	s.mu.Lock()
	if _, ok := s.served[v]; ok {
		s.mu.Unlock()
		return
	}
	s.states[v] = VersionStatus{Version: v, State: "LOADING", ErrorCode: "OK"}
	s.mu.Unlock()
	servable, warmed, err := s.Load(filepath.Join(s.Base, strconv.FormatInt(v, 10)), v)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		message := err.Error()
		if len(message) > 2000 {
			message = message[:2000]
		}
		log.Printf("version %d of %s failed to load: %v", v, s.Name, err)
		s.states[v] = VersionStatus{Version: v, State: "END", ErrorCode: "UNKNOWN", ErrorMessage: message}
		return
	}
	s.served[v] = servable
	s.states[v] = VersionStatus{Version: v, State: "AVAILABLE", ErrorCode: "OK"}
	if warmed > 0 {
		log.Printf("serving version %d of %s (warmed up with %d requests)", v, s.Name, warmed)
	} else {
		log.Printf("serving version %d of %s", v, s.Name)
	}
}

// Start polls now, then every `every`.
func (s *Store) Start(every time.Duration) {
	s.Poll()
	go func() {
		for range time.Tick(every) {
			s.Poll()
		}
	}()
}

// Statuses is every version's state.
func (s *Store) Statuses() []VersionStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]VersionStatus, 0, len(s.states))
	for _, st := range s.states {
		out = append(out, st)
	}
	return out
}

// ServingVersion is the newest served version (false: none).
func (s *Store) ServingVersion() (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	best, ok := int64(0), false
	for v := range s.served {
		if !ok || v > best {
			best, ok = v, true
		}
	}
	return best, ok
}

// Resolve is the served version a request means (under the lock).
func (s *Store) resolve(version *int64, label string) (int64, error) {
	served := s.loadedSet()
	var v int64
	switch {
	case label != "":
		lv, ok := s.Labels[label]
		if !ok {
			return 0, invalid("Unrecognized servable version label: %s", label)
		}
		v = lv
	case version != nil:
		v = *version
	default:
		if chosen := SplitLabel(s.Traffic, s.Labels, served, s.draw()); chosen != "" {
			v = s.Labels[chosen]
		} else {
			best, ok := int64(0), false
			for x := range served {
				if !ok || x > best {
					best, ok = x, true
				}
			}
			if !ok {
				return 0, notFound(s.Name, nil)
			}
			return best, nil
		}
	}
	if !served[v] {
		return 0, notFound(s.Name, &v)
	}
	return v, nil
}

// Resolve is the version a request means, without taking it.
func (s *Store) Resolve(version *int64, label string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resolve(version, label)
}

// Acquire is the servable a request means, held until its release is called.
func (s *Store) Acquire(model string, version *int64, label string) (*Servable, func(), error) {
	if model != s.Name {
		return nil, nil, notFound(model, version)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.resolve(version, label)
	if err != nil {
		return nil, nil, err
	}
	servable := s.served[v]
	servable.running.Add(1)
	return servable, servable.running.Done, nil
}
