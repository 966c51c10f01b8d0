package main

// Batching as TensorFlow Serving does it: requests to the same version, signature and row
// shapes wait in one queue; a batch runs as soon as it is full or its oldest request
// waited batch_timeout_micros, padded up to the next allowed batch size; each request
// gets its own rows back. At most num_batch_threads batches run at once, on batch
// goroutines or on the caller's own (a lone request makes no hop).

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// BatchingParameters is TensorFlow Serving's BatchingParameters (the fields honoured).
type BatchingParameters struct {
	MaxBatchSize       int
	BatchTimeoutMicros int
	NumBatchThreads    int
	MaxEnqueuedBatches int
	AllowedBatchSizes  []int
	PadVariableLength  bool
}

// DefaultBatching is the Python server's measured default.
func DefaultBatching() BatchingParameters {
	return BatchingParameters{MaxBatchSize: 256, NumBatchThreads: 1, MaxEnqueuedBatches: 64}
}

func (p BatchingParameters) String() string {
	return fmt.Sprintf("BatchingParameters(max_batch_size=%d, batch_timeout_micros=%d, num_batch_threads=%d, max_enqueued_batches=%d, allowed_batch_sizes=%v)",
		p.MaxBatchSize, p.BatchTimeoutMicros, p.NumBatchThreads, p.MaxEnqueuedBatches, p.AllowedBatchSizes)
}

// Check is what is wrong with the parameters (TensorFlow Serving's rules).
func (p BatchingParameters) Check() []string {
	var problems []string
	if p.MaxBatchSize < 1 {
		problems = append(problems, "max_batch_size must be at least 1")
	}
	if p.BatchTimeoutMicros < 0 {
		problems = append(problems, "batch_timeout_micros may not be negative")
	}
	if p.NumBatchThreads < 1 {
		problems = append(problems, "num_batch_threads must be at least 1")
	}
	if p.MaxEnqueuedBatches < 1 {
		problems = append(problems, "max_enqueued_batches must be at least 1")
	}
	if s := p.AllowedBatchSizes; len(s) > 0 {
		for i := range s {
			if s[i] < 1 || (i > 0 && s[i] <= s[i-1]) {
				problems = append(problems, "allowed_batch_sizes must be positive and increasing")
				break
			}
		}
		if s[len(s)-1] != p.MaxBatchSize {
			problems = append(problems, fmt.Sprintf("the last entry in allowed_batch_sizes must equal max_batch_size (%d != %d)", s[len(s)-1], p.MaxBatchSize))
		}
	}
	return problems
}

var batchField = regexp.MustCompile(`^\s*([A-Za-z_]+)\s*(?:\{\s*value\s*:\s*([^}\s]+)\s*\}|:\s*([^\s{}]+))`)
var comment = regexp.MustCompile(`#[^\n]*`)

// ParseBatching reads a --batching_parameters_file (protobuf text format).
func ParseBatching(text string) (BatchingParameters, error) {
	p := DefaultBatching()
	body := strings.TrimRight(comment.ReplaceAllString(text, ""), " \t\r\n")
	for strings.TrimSpace(body) != "" {
		m := batchField.FindStringSubmatch(body)
		if m == nil {
			head := body
			if len(head) > 40 {
				head = head[:40]
			}
			return p, fmt.Errorf("cannot read the batching parameters at %q", head)
		}
		body = body[len(m[0]):]
		name, raw := m[1], m[2]+m[3]
		if name == "thread_pool_name" {
			continue
		}
		if name == "pad_variable_length_inputs" {
			p.PadVariableLength = strings.ToLower(raw) == "true"
			continue
		}
		n, err := strconv.Atoi(raw)
		if err != nil {
			return p, fmt.Errorf("batching parameter %s: %q is not a whole number", name, raw)
		}
		switch name {
		case "max_batch_size":
			p.MaxBatchSize = n
		case "batch_timeout_micros":
			p.BatchTimeoutMicros = n
		case "num_batch_threads":
			p.NumBatchThreads = n
		case "max_enqueued_batches":
			p.MaxEnqueuedBatches = n
		case "allowed_batch_sizes":
			p.AllowedBatchSizes = append(p.AllowedBatchSizes, n)
		default:
			return p, fmt.Errorf("unknown batching parameter '%s'", name)
		}
	}
	if problems := p.Check(); len(problems) > 0 {
		return p, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return p, nil
}

// PlanBatch: how many queued requests (of these sizes, the oldest having waited) to take
// now (ok), or how long more to wait.
func PlanBatch(sizes []int, waited time.Duration, p BatchingParameters) (int, time.Duration, bool) {
	if len(sizes) == 0 {
		return 0, time.Hour, false
	}
	rows, taken := 0, 0
	for _, size := range sizes {
		if rows+size > p.MaxBatchSize {
			return taken, 0, true
		}
		rows += size
		taken++
	}
	if rows == p.MaxBatchSize {
		return taken, 0, true
	}
	left := time.Duration(p.BatchTimeoutMicros)*time.Microsecond - waited
	if left <= 0 {
		return taken, 0, true
	}
	return 0, left, false
}

// PaddedSize is the smallest allowed batch size holding rows.
func PaddedSize(rows int, p BatchingParameters) int {
	for _, s := range p.AllowedBatchSizes {
		if s >= rows {
			return s
		}
	}
	return rows
}

// RunFunc is one model call.
type RunFunc func(map[string]*Tensor) (map[string]*Tensor, error)

type result struct {
	outputs map[string]*Tensor
	err     error
}

type task struct {
	inputs map[string]*Tensor
	rows   int
	done   chan result
	queued time.Time
}

type batchQueue struct {
	run   RunFunc
	tasks []*task
	rows  int
}

// Batcher holds the queues.
type Batcher struct {
	params  BatchingParameters
	mu      sync.Mutex
	queues  map[string]*batchQueue
	running int
	wake    chan struct{}
	alone   int
}

// NewBatcher starts num_batch_threads batch goroutines.
func NewBatcher(p BatchingParameters) *Batcher {
	b := &Batcher{params: p, queues: map[string]*batchQueue{}, wake: make(chan struct{}, p.NumBatchThreads)}
	for i := 0; i < p.NumBatchThreads; i++ {
		go b.work()
	}
	return b
}

// batchKey is what requests must share to be merged ("" : not batchable).
func batchKey(inputs map[string]*Tensor) (string, int) {
	var sb strings.Builder
	rows := -1
	for _, k := range sortedKeys(inputs) {
		t := inputs[k]
		if len(t.Shape) == 0 || (rows >= 0 && int(t.Shape[0]) != rows) {
			return "", 0
		}
		rows = int(t.Shape[0])
		fmt.Fprintf(&sb, "%s/%d/%v;", k, t.DType, t.Shape[1:])
	}
	return sb.String(), rows
}

func (b *Batcher) notify() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Submit queues a call of `key` (version and signature) and waits for its rows.
func (b *Batcher) Submit(key string, run RunFunc, inputs map[string]*Tensor) (map[string]*Tensor, error) {
	shape, rows := batchKey(inputs)
	b.mu.Lock()
	if shape == "" {
		b.alone++
		shape, rows = fmt.Sprintf("alone %d", b.alone), 0
	}
	if rows > b.params.MaxBatchSize {
		b.mu.Unlock()
		return nil, invalid("Task size %d is larger than maximum input batch size %d", rows, b.params.MaxBatchSize)
	}
	qkey := key + "|" + shape
	q := b.queues[qkey]
	if q == nil {
		q = &batchQueue{run: run}
		b.queues[qkey] = q
	}
	if q.rows+rows > b.params.MaxEnqueuedBatches*b.params.MaxBatchSize {
		b.mu.Unlock()
		return nil, newError(CodeUnavailable, "The batch scheduling queue to which this task was submitted is full")
	}
	t := &task{inputs: inputs, rows: max(rows, 1), done: make(chan result, 1), queued: time.Now()}
	q.tasks = append(q.tasks, t)
	q.rows += rows
	found, tasks := b.take()
	b.mu.Unlock()
	if found != nil {
		b.runCounted(found, tasks)
	} else {
		b.notify()
	}
	r := <-t.done
	return r.outputs, r.err
}

// take is, under the lock, a batch to run now (the oldest ready queue first), counted.
func (b *Batcher) take() (RunFunc, []*task) {
	if b.running >= b.params.NumBatchThreads {
		return nil, nil
	}
	now := time.Now()
	var bestKey string
	var best *batchQueue
	var n int
	for k, q := range b.queues {
		sizes := make([]int, len(q.tasks))
		for i, t := range q.tasks {
			sizes[i] = t.rows
		}
		take, _, ok := PlanBatch(sizes, now.Sub(q.tasks[0].queued), b.params)
		if ok && (best == nil || q.tasks[0].queued.Before(best.tasks[0].queued)) {
			bestKey, best, n = k, q, max(take, 1)
		}
	}
	if best == nil {
		return nil, nil
	}
	taken := append([]*task(nil), best.tasks[:n]...)
	best.tasks = best.tasks[n:]
	for _, t := range taken {
		best.rows -= t.rows
	}
	if len(best.tasks) == 0 {
		delete(b.queues, bestKey)
	}
	b.running++
	return best.run, taken
}

func (b *Batcher) waitTime() time.Duration {
	wait := time.Second
	now := time.Now()
	for _, q := range b.queues {
		sizes := make([]int, len(q.tasks))
		for i, t := range q.tasks {
			sizes[i] = t.rows
		}
		if _, left, ok := PlanBatch(sizes, now.Sub(q.tasks[0].queued), b.params); !ok && left < wait {
			wait = left
		}
	}
	return wait
}

func (b *Batcher) work() {
	for {
		b.mu.Lock()
		run, tasks := b.take()
		wait := time.Second
		if run == nil {
			wait = b.waitTime()
		}
		b.mu.Unlock()
		if run != nil {
			b.runCounted(run, tasks)
			continue
		}
		timer := time.NewTimer(wait)
		select {
		case <-b.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (b *Batcher) runCounted(run RunFunc, tasks []*task) {
	defer func() {
		b.mu.Lock()
		b.running--
		more := len(b.queues) > 0
		b.mu.Unlock()
		if more {
			b.notify()
		}
	}()
	if len(tasks) == 1 && len(b.params.AllowedBatchSizes) == 0 {
		out, err := run(tasks[0].inputs)
		tasks[0].done <- result{out, err}
		return
	}
	rows := 0
	for _, t := range tasks {
		rows += t.rows
	}
	size := PaddedSize(rows, b.params)
	merged := map[string]*Tensor{}
	for k := range tasks[0].inputs {
		parts := make([]*Tensor, len(tasks))
		for i, t := range tasks {
			parts[i] = t.inputs[k]
		}
		merged[k] = Concat(parts, size)
	}
	out, err := run(merged)
	if err == nil {
		for name, t := range out {
			if t.Rows() != size {
				err = newError(CodeFailedPrecondition, "Batched output tensor '%s' has 0th dimension %d, not the batch's %d", name, t.Rows(), size)
				break
			}
		}
	}
	if err != nil {
		for _, t := range tasks {
			t.done <- result{nil, err}
		}
		return
	}
	start := 0
	for _, t := range tasks {
		mine := make(map[string]*Tensor, len(out))
		for name, o := range out {
			mine[name] = o.Slice(start, start+t.rows)
		}
		t.done <- result{mine, nil}
		start += t.rows
	}
}
