// tfkube-modelserver: tfkube's native model server. TensorFlow Serving's REST and gRPC
// APIs over TensorFlow's C API, with the flags of `python -m tfkube.serving` (its
// Python twin, kept as the fallback): --model_name, --model_base_path, --rest_api_port,
// --rest_api_host, --port, --model_version[_policy], --version_labels, --label_traffic,
// --enable_batching, --batching_parameters_file, --max_request_bytes,
// --max_request_elements, ... The secret comes in TFKUBE_SERVING_TOKEN; GET
// /tfkube/ready tells readiness without it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type boolFlag struct{ v *bool }

func (b boolFlag) String() string {
	if b.v == nil {
		return "false"
	}
	return strconv.FormatBool(*b.v)
}
func (b boolFlag) IsBoolFlag() bool { return true }
func (b boolFlag) Set(s string) error {
	switch strings.ToLower(s) {
	case "1", "true", "yes":
		*b.v = true
	case "0", "false", "no":
		*b.v = false
	default:
		return fmt.Errorf("%q: expected true or false", s)
	}
	return nil
}

type positiveFlag struct{ v *int }

func (p positiveFlag) String() string {
	if p.v == nil {
		return "0"
	}
	return strconv.Itoa(*p.v)
}
func (p positiveFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return fmt.Errorf("%q: expected a positive whole number", s)
	}
	*p.v = n
	return nil
}

type funcFlag struct {
	set  func(string) error
	text string
}

func (f *funcFlag) String() string { return f.text }
func (f *funcFlag) Set(s string) error {
	f.text = s
	return f.set(s)
}

// Options is the command line.
type Options struct {
	ModelName, BasePath, RestHost  string
	RestPort, Port, GRPCMaxThreads int
	MaxRequestBytes, MaxElements   int
	ModelVersion                   *int64
	Policy                         *Policy
	Labels, Traffic                map[string]int64
	PollSeconds                    float64
	Batching, Warmup               bool
	BatchingFile                   string
	IntraOp, InterOp               int
}

func parseFlags(args []string) (*Options, error) {
	o := &Options{Labels: map[string]int64{}, Traffic: map[string]int64{}, Warmup: true,
		MaxRequestBytes: 64 << 20, MaxElements: 1 << 22, InterOp: -1}
	fs := flag.NewFlagSet("tfkube-modelserver", flag.ContinueOnError)
	fs.StringVar(&o.ModelName, "model_name", "", "The name in /v1/models/<name>.")
	fs.StringVar(&o.BasePath, "model_base_path", "", "Folder of numbered SavedModels.")
	fs.IntVar(&o.RestPort, "rest_api_port", 8501, "REST port.")
	fs.StringVar(&o.RestHost, "rest_api_host", "127.0.0.1", "Address both doors listen on.")
	fs.IntVar(&o.Port, "port", 0, "gRPC port (0: none).")
	fs.IntVar(&o.GRPCMaxThreads, "grpc_max_threads", 32, "Accepted for compatibility.")
	fs.Var(positiveFlag{&o.MaxRequestBytes}, "max_request_bytes", "The largest gRPC message or REST body read.")
	fs.Var(positiveFlag{&o.MaxElements}, "max_request_elements", "The most values one request may bring.")
	fs.Var(&funcFlag{set: func(s string) error {
		v, err := strconv.ParseInt(s, 10, 64)
		o.ModelVersion = &v
		return err
	}}, "model_version", "Serve this version only.")
	fs.Var(&funcFlag{set: func(s string) error {
		p, err := ParsePolicy(s)
		o.Policy = &p
		return err
	}}, "model_version_policy", "latest, latest:N, all or specific:V[,V...].")
	fs.Var(&funcFlag{set: func(s string) (err error) {
		o.Labels, err = ParsePairs(s, "a label")
		return err
	}}, "version_labels", "label=version[,label=version].")
	fs.Var(&funcFlag{set: func(s string) (err error) {
		o.Traffic, err = ParsePairs(s, "a weight")
		return err
	}}, "label_traffic", "label=weight[,...].")
	fs.Float64Var(&o.PollSeconds, "file_system_poll_wait_seconds", 1.0, "How often to look for a newer version.")
	fs.Var(boolFlag{&o.Batching}, "enable_batching", "Batch requests.")
	fs.StringVar(&o.BatchingFile, "batching_parameters_file", "", "BatchingParameters (text format).")
	fs.Var(boolFlag{&o.Warmup}, "enable_model_warmup", "Replay assets.extra/tf_serving_warmup_requests.")
	fs.IntVar(&o.IntraOp, "tensorflow_intra_op_parallelism", 0, "Intra-op threads (0: 1 where the server may use 2 CPUs or fewer, else TensorFlow's choice).")
	fs.IntVar(&o.InterOp, "tensorflow_inter_op_parallelism", -1, "-1 the calling thread, 0 TensorFlow's choice, N a pool.")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unrecognized arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.ModelName == "" || o.BasePath == "" {
		return nil, errors.New("the following arguments are required: --model_name, --model_base_path")
	}
	if o.ModelVersion != nil && o.Policy != nil {
		return nil, errors.New("give --model_version or --model_version_policy, not both")
	}
	var unknown []string
	for _, k := range sortedKeys(o.Traffic) {
		if _, ok := o.Labels[k]; !ok {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("--label_traffic names labels --version_labels does not: %s", strings.Join(unknown, ", "))
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "tfkube-modelserver: error: %v\n", err)
		os.Exit(2)
	}
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("tfkube.serving ")
	if os.Getenv("TF_CPP_MIN_LOG_LEVEL") == "" {
		// TensorFlow reads it as its library loads, before main: run again with it set
		if self, err := os.Executable(); err == nil {
			err = syscall.Exec(self, os.Args, append(os.Environ(), "TF_CPP_MIN_LOG_LEVEL=2"))
			log.Printf("could not quiet TensorFlow's logs: %v", err)
		}
	}
	if path := os.Getenv("TFKUBE_MODELSERVER_CPUPROFILE"); path != "" { // a profile to measure with
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	gc := tuneGC()
	if gc != "" {
		gc = "; collector " + gc
	}
	token := os.Getenv("TFKUBE_SERVING_TOKEN")
	os.Unsetenv("TFKUBE_SERVING_TOKEN")

	server := &Server{MaxElements: o.MaxElements, MaxRequestBytes: o.MaxRequestBytes}
	batching := ""
	if o.Batching {
		params := DefaultBatching()
		if o.BatchingFile != "" {
			text, err := os.ReadFile(o.BatchingFile)
			if err == nil {
				params, err = ParseBatching(string(text))
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "--batching_parameters_file: %v\n", err)
				os.Exit(1)
			}
		}
		server.Batcher = NewBatcher(params)
		batching = "; batching " + params.String()
	}
	policy := Policy{Latest: 1}
	if o.Policy != nil {
		policy = *o.Policy
	} else if o.ModelVersion != nil {
		policy = Policy{Specific: []int64{*o.ModelVersion}}
	}
	load := func(path string, version int64) (*Servable, int, error) {
		m, err := LoadModel(path, intraOpThreads(o.IntraOp, runtime.GOMAXPROCS(0)), o.InterOp)
		if err != nil {
			return nil, 0, err
		}
		warmed := 0
		if o.Warmup {
			if warmed, err = server.WarmUp(m, path); err != nil {
				m.Close()
				return nil, 0, err
			}
		}
		return &Servable{Version: version, Model: m}, warmed, nil
	}
	server.Store = NewStore(o.ModelName, o.BasePath, policy, o.Labels, o.Traffic, load)
	server.Store.Start(time.Duration(o.PollSeconds * float64(time.Second)))

	rest := &REST{Server: server, Token: token}
	var grpcServer interface {
		Serve(net.Listener) error
		GracefulStop()
		Stop()
	}
	if o.Port != 0 {
		gs := NewGRPCServer(server, token)
		listener, err := net.Listen("tcp", net.JoinHostPort(o.RestHost, strconv.Itoa(o.Port)))
		if err != nil {
			log.Fatalf("gRPC port: %v", err)
		}
		go func() { _ = gs.Serve(listener) }()
		grpcServer = gs
		probe, err := NewHealthProbe(o.RestHost, o.Port)
		if err != nil {
			log.Fatalf("gRPC probe: %v", err)
		}
		rest.GRPCReady = probe.Check
	}
	labels := ""
	if len(o.Labels) > 0 {
		labels = fmt.Sprintf("; labels %v", o.Labels)
	}
	grpcText := ""
	if o.Port != 0 {
		grpcText = fmt.Sprintf(" and gRPC %s:%d", o.RestHost, o.Port)
	}
	fmt.Fprintf(os.Stderr, "tfkube model server (native): %s from %s (versions: %s%s%s%s) at http://%s/v1/models/%s%s\n",
		o.ModelName, o.BasePath, policy.Describe(), labels, batching, gc,
		net.JoinHostPort(o.RestHost, strconv.Itoa(o.RestPort)), o.ModelName, grpcText)

	httpServer := &http.Server{Handler: rest, ReadHeaderTimeout: 30 * time.Second}
	listener, err := net.Listen("tcp", net.JoinHostPort(o.RestHost, strconv.Itoa(o.RestPort)))
	if err != nil {
		log.Fatalf("REST port: %v", err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	drained := make(chan struct{})
	go func() {
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = httpServer.Shutdown(ctx)
		close(drained)
	}()
	if err := httpServer.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("REST: %v", err)
	}
	// Serve returns as soon as Shutdown begins: the answers in flight are written (or 5 s
	// pass) before the process may end
	<-drained
	if grpcServer != nil {
		done := make(chan struct{})
		go func() { grpcServer.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			grpcServer.Stop()
		}
	}
}

// intraOpThreads is the session's intra-op threads for --tensorflow_intra_op_parallelism
// (0: the default) on a server that may use `cpus` CPUs (GOMAXPROCS: the affinity mask and
// the cgroup's CPU limit). With 2 CPUs or fewer the default is 1: the concurrency comes
// from the requests, and a second intra-op thread only spins against the server's own
// goroutines (benchmarks/serving, docs/benchmarks.md "Intra-op threads": at batch 64 with
// 4 clients 0.54x/0.82x of in-process over REST/gRPC with 1, 0.38x/0.56x with
// TensorFlow's 2). Above that, TensorFlow's choice (one per CPU), not measured here.
func intraOpThreads(flagValue, cpus int) int {
	if flagValue == 0 && cpus <= 2 {
		return 1
	}
	return flagValue
}
