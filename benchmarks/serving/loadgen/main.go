// Command loadgen is benchmarks/serving's client in Go: N concurrent callers send the
// same request bytes to a model server over REST or gRPC for a number of seconds and it
// prints one JSON line (requests, seconds, p50/p99 latency, its own CPU time over the
// measurement). Why Go: on a 2-core machine the client shares the server's cores, and a
// Python client's CPU per call (its HTTP or gRPC machinery) weighs as much as a batch-64
// call's model time; this client's is a fraction of it, so the gap left is the server's.
//
// The request is a file of exact bytes, made by benchmarks/serving/run.py: for REST the
// JSON body (POSTed to -path over one keep-alive connection per caller, HTTP/1.1 written
// here: see restCaller), for gRPC a serialized tensorflow.serving.PredictRequest (sent
// as is to -method through a pass-through codec on one channel shared by the callers, as
// run.py's grpc.aio client shares one: no generated code). Every
// answer is checked (REST: 200 and a body starting with {"predictions"; gRPC: no error
// and a non-empty message); the first failure stops the run: exit 1, the status and the
// body on stderr.
//
// Before the clock starts every caller makes its connection and has one call answered,
// then the callers call for -warmup seconds unrecorded; each caller starts a call while
// the measurement's time is not over, and the seconds reported run until the last call
// answered (as run.py's Python clients count). It runs Go on one core by default
// (-procs 1, GOMAXPROCS): on 2 cores shared with the server, a second one mostly adds
// the scheduler's spinning (measured: about 1.3x the CPU per call at the same req/s).
//
//	loadgen -kind rest|grpc -addr HOST:PORT -clients N -seconds S -request FILE
//	        [-path /v1/models/NAME:predict] [-method /tensorflow.serving.PredictionService/Predict]
//	        [-warmup 0.2] [-procs 1]
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// rawCodec sends and receives messages as the bytes they are (named "proto": the wire's
// content type stays application/grpc+proto, as a generated stub's).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }

// Unmarshal copies the answer into the caller's buffer, reused from call to call.
func (rawCodec) Unmarshal(data []byte, v any) error {
	p := v.(*[]byte)
	*p = append((*p)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// caller makes one call and checks its answer: nil, or why the answer is wrong.
type caller func(ctx context.Context) error

// failure is a wrong answer or a gRPC error status (other errors are the network's).
type failure struct{ msg string }

func (f *failure) Error() string { return f.msg }

// restCaller is HTTP/1.1 on one keep-alive connection of its own, written here rather than
// net/http's client: the request (head and body, made once) in one write, the answer read
// by its Content-Length, all on the caller's goroutine. net/http hands each request to a
// writer and a reader goroutine of the connection: measured here at batch 64, 100-240 µs
// of CPU per call against 60-85 µs for this (and ~100 µs for run.py's asyncio client),
// the very cost this client is meant not to add.
func restCaller(addr, path string, body []byte) caller {
	request := append([]byte(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, addr, len(body))),
		body...)
	var conn net.Conn
	var r *bufio.Reader
	var answer []byte
	return func(ctx context.Context) error {
		if conn == nil {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return err
			}
			conn, r = c, bufio.NewReaderSize(c, 64<<10)
		}
		if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
			return err
		}
		if _, err := conn.Write(request); err != nil {
			return err
		}
		code, length, keep, err := readHead(r)
		if err != nil {
			return fmt.Errorf("REST %s: %w", path, err)
		}
		answer = slices.Grow(answer[:0], length)[:length]
		if _, err := io.ReadFull(r, answer); err != nil {
			return err
		}
		if !keep {
			conn.Close()
			conn = nil
		}
		if code != http.StatusOK || !bytes.HasPrefix(answer, []byte(`{"predictions"`)) {
			return &failure{fmt.Sprintf("REST %s: HTTP %d: %s", path, code, clip(answer))}
		}
		return nil
	}
}

// readHead reads an answer's status line and headers: its status code, its
// Content-Length (an answer without one is refused: the model servers send it) and
// whether the connection stays open.
func readHead(r *bufio.Reader) (code, length int, keep bool, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, 0, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, 0, false, fmt.Errorf("not an HTTP answer: %q", line)
	}
	if code, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, 0, false, fmt.Errorf("a status line of %q", line)
	}
	length, keep = -1, line[7] == '1'
	for {
		line, err = r.ReadSlice('\n')
		if err != nil {
			return 0, 0, false, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, 0, false, fmt.Errorf("a header line of %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, 0, false, fmt.Errorf("Content-Length: %q", value)
			}
		case bytes.EqualFold(name, []byte("Connection")):
			keep = !bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, 0, false, fmt.Errorf("an answer in Transfer-Encoding %q", value)
		}
	}
	if length < 0 {
		return 0, 0, false, fmt.Errorf("an answer without Content-Length")
	}
	return code, length, keep, nil
}

func grpcCaller(conn *grpc.ClientConn, method string, request []byte) caller {
	var answer []byte
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := conn.Invoke(ctx, method, &request, &answer); err != nil {
			if ctx.Err() != nil {
				return err
			}
			s := status.Convert(err)
			return &failure{fmt.Sprintf("gRPC %s: %s: %s", method, s.Code(), s.Message())}
		}
		if len(answer) == 0 {
			return &failure{fmt.Sprintf("gRPC %s: an empty answer", method)}
		}
		return nil
	}
}

func clip(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}

// Result is the JSON line printed.
type Result struct {
	Kind     string  `json:"kind"`
	Clients  int     `json:"clients"`
	Requests int     `json:"requests"`
	Seconds  float64 `json:"seconds"`
	RPS      float64 `json:"rps"`
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	// CPU is this process's user + system CPU seconds over the measurement (warm-up not
	// included; getrusage RUSAGE_SELF), CPUus its µs per request.
	CPU   float64 `json:"cpu_s"`
	CPUus float64 `json:"cpu_us_per_request"`
}

// percentiles are run.py's: the median (two middle values averaged) and the value at
// index int(0.99 n) of the sorted latencies.
func percentiles(latencies []time.Duration) (p50, p99 float64) {
	n := len(latencies)
	if n == 0 {
		return 0, 0
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if n%2 == 1 {
		p50 = ms(latencies[n/2])
	} else {
		p50 = (ms(latencies[n/2-1]) + ms(latencies[n/2])) / 2
	}
	return p50, ms(latencies[min(n-1, int(0.99*float64(n)))])
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

// run has each of the callers call until the measurement's time is over; the first
// error stops them all and is returned.
func run(callers []caller, warmup, seconds time.Duration) (Result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	var first error
	fail := func(err error) {
		once.Do(func() { first = err; cancel() })
	}
	latencies := make([][]time.Duration, len(callers))
	var ready, done sync.WaitGroup
	begin := make(chan struct{})
	var warmStop, stop time.Time
	for i, call := range callers {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			err := call(ctx) // the connection made, one answer checked
			ready.Done()
			if err != nil {
				fail(err)
				return
			}
			<-begin
			for time.Now().Before(warmStop) && ctx.Err() == nil {
				if err := call(ctx); err != nil {
					fail(err)
					return
				}
			}
			mine := make([]time.Duration, 0, 4096)
			for ctx.Err() == nil {
				t := time.Now()
				if !t.Before(stop) {
					break
				}
				if err := call(ctx); err != nil {
					fail(err)
					return
				}
				mine = append(mine, time.Since(t))
			}
			latencies[i] = mine
		}()
	}
	ready.Wait()
	warmStop = time.Now().Add(warmup)
	stop = warmStop.Add(seconds)
	close(begin)
	// the measurement's CPU: from the warm-up's end (callers still warming then are a
	// few microseconds of it at most)
	time.Sleep(time.Until(warmStop))
	cpu0, t0 := cpuSeconds(), time.Now()
	done.Wait()
	elapsed, cpu := time.Since(t0).Seconds(), cpuSeconds()-cpu0
	if first != nil {
		return Result{}, first
	}
	var all []time.Duration
	for _, mine := range latencies {
		all = append(all, mine...)
	}
	p50, p99 := percentiles(all)
	r := Result{Requests: len(all), Seconds: elapsed, P50ms: p50, P99ms: p99, CPU: cpu}
	if elapsed > 0 {
		r.RPS = float64(len(all)) / elapsed
	}
	if len(all) > 0 {
		r.CPUus = 1e6 * cpu / float64(len(all))
	}
	return r, nil
}

func main() {
	kind := flag.String("kind", "", "rest or grpc")
	addr := flag.String("addr", "", "the model server's HOST:PORT (its REST or gRPC port)")
	clients := flag.Int("clients", 1, "concurrent callers")
	seconds := flag.Float64("seconds", 3, "the measurement's length")
	warmup := flag.Float64("warmup", 0.2, "seconds of unrecorded calls before it")
	requestFile := flag.String("request", "", "the request's bytes: the JSON body (rest), a "+
		"serialized tensorflow.serving.PredictRequest (grpc)")
	path := flag.String("path", "", "rest: the path POSTed to, e.g. /v1/models/digits:predict")
	method := flag.String("method", "/tensorflow.serving.PredictionService/Predict",
		"grpc: the full method name")
	procs := flag.Int("procs", 1, "GOMAXPROCS: the cores Go runs this client's goroutines on")
	flag.Parse()
	die := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "loadgen: "+format+"\n", args...)
		os.Exit(1)
	}
	if *addr == "" || *requestFile == "" || *clients < 1 || *seconds <= 0 || *warmup < 0 ||
		*procs < 1 {
		flag.Usage()
		os.Exit(2)
	}
	runtime.GOMAXPROCS(*procs)
	request, err := os.ReadFile(*requestFile)
	if err != nil {
		die("%v", err)
	}
	callers := make([]caller, *clients)
	switch *kind {
	case "rest":
		if *path == "" {
			die("-kind rest needs -path")
		}
		for i := range callers {
			callers[i] = restCaller(*addr, *path, request)
		}
	case "grpc":
		conn, err := grpc.NewClient(*addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{}),
				grpc.MaxCallRecvMsgSize(1<<30), grpc.MaxCallSendMsgSize(1<<30)))
		if err != nil {
			die("%v", err)
		}
		defer conn.Close()
		for i := range callers {
			callers[i] = grpcCaller(conn, *method, request)
		}
	default:
		die("-kind: rest or grpc, not %q", *kind)
	}
	result, err := run(callers, secondsOf(*warmup), secondsOf(*seconds))
	var wrong *failure
	if errors.As(err, &wrong) {
		die("stopped at the first failure: %s", wrong.msg)
	} else if err != nil {
		die("stopped at the first failure: %v", err)
	}
	result.Kind, result.Clients = *kind, *clients
	line, _ := json.Marshal(result)
	if _, err := io.WriteString(os.Stdout, string(line)+"\n"); err != nil {
		os.Exit(1)
	}
}

func secondsOf(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
