package main

// The gRPC door: tensorflow.serving.PredictionService (Predict, Classify, Regress,
// GetModelMetadata), ModelService.GetModelStatus and grpc.health.v1.Health/Check, on
// grpc-go with a codec that hands messages over as bytes (read and written by wire.go).

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log"
	"math"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	predictionService = "/tensorflow.serving.PredictionService/"
	modelService      = "/tensorflow.serving.ModelService/"
	healthCheck       = "/grpc.health.v1.Health/Check"
)

// rawCodec passes messages through as bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// GRPC is the gRPC door.
type GRPC struct {
	*Server
	Token   string
	methods map[string]func([]byte) ([]byte, error)
}

// NewGRPCServer makes the gRPC server (messages over max_request_bytes are refused,
// RESOURCE_EXHAUSTED, by grpc-go before they are handed over).
func NewGRPCServer(s *Server, token string) *grpc.Server {
	g := &GRPC{Server: s, Token: token}
	g.methods = map[string]func([]byte) ([]byte, error){
		predictionService + "Predict":          g.predict,
		predictionService + "Classify":         g.classify,
		predictionService + "Regress":          g.regress,
		predictionService + "GetModelMetadata": g.metadata,
		modelService + "GetModelStatus":        g.status,
	}
	return grpc.NewServer(
		grpc.ForceServerCodec(rawCodec{}),
		grpc.MaxRecvMsgSize(s.MaxRequestBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.UnknownServiceHandler(g.handle),
		// calls run on goroutines kept for them (their stacks already grown to a model
		// call's depth) rather than a new goroutine each; past these, a new one as before
		grpc.NumStreamWorkers(StreamWorkers),
	)
}

// StreamWorkers is the gRPC door's kept goroutines: 16 concurrent calls run on them.
const StreamWorkers = 16

func (g *GRPC) handle(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	var request []byte
	if err := stream.RecvMsg(&request); err != nil {
		return err
	}
	if method == healthCheck {
		answer := []byte{0x08, 0x01} // SERVING
		if _, ok := g.Store.ServingVersion(); !ok {
			answer = []byte{0x08, 0x02}
		}
		return stream.SendMsg(&answer)
	}
	fn, ok := g.methods[method]
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	if g.Token != "" {
		md, _ := metadata.FromIncomingContext(stream.Context())
		sent := ""
		if values := md.Get("authorization"); len(values) > 0 {
			sent = values[0]
		}
		if subtle.ConstantTimeCompare([]byte(sent), []byte("Bearer "+g.Token)) != 1 {
			return status.Error(codes.Unauthenticated, "a valid token is required")
		}
	}
	answer, err := g.guarded(fn, request)
	if err != nil {
		se := asServing(err)
		return status.Error(codes.Code(se.Code), se.Message)
	}
	return stream.SendMsg(&answer)
}

func (g *GRPC) guarded(fn func([]byte) ([]byte, error), request []byte) (answer []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			log.Printf("gRPC call failed: %v", p)
			err = newError(CodeInternal, "%v", p)
		}
	}()
	return fn(request)
}

func (g *GRPC) predict(request []byte) ([]byte, error) {
	call, err := decodePredict(request)
	if err != nil {
		return nil, err
	}
	spec := call.Spec
	sv, release, err := g.Store.Acquire(spec.Name, spec.Version, spec.Label)
	if err != nil {
		return nil, err
	}
	defer release()
	sig, name, err := signatureOf(sv.Model, spec.SignatureName)
	if err != nil {
		return nil, err
	}
	given := map[string][]byte{}
	for k, v := range call.Tensors {
		given[k] = v
	}
	if err := checkInputNames(given, sig, name); err != nil {
		return nil, err
	}
	bounds := g.Bounds(sig)
	budget := g.MaxElements
	inputs := map[string]*Tensor{}
	for _, k := range sortedKeys(call.Tensors) {
		limit := budget
		if b, ok := bounds[k]; ok && b < limit {
			limit = b
		}
		t, err := decodeTensor(call.Tensors[k], limit)
		if err != nil {
			return nil, err
		}
		budget -= t.NumElements()
		inputs[k] = t
	}
	if err := checkedInputs(inputs, sig); err != nil {
		return nil, err
	}
	outputs, err := g.Run(sv, name, sig, inputs)
	if err != nil {
		return nil, err
	}
	if len(call.OutputFilter) > 0 {
		var unknown []string
		kept := map[string]*Tensor{}
		for _, k := range call.OutputFilter {
			if t, ok := outputs[k]; ok {
				kept[k] = t
			} else {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			return nil, invalid("output tensor alias not found in signature: %s", joinSorted(unknown))
		}
		outputs = kept
	}
	return encodePredictResponse(spec.Name, sv.Version, name, outputs), nil
}

func joinSorted(names []string) string {
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	out := ""
	for i, k := range sortedKeys(set) {
		if i > 0 {
			out += ", "
		}
		out += k
	}
	return out
}

func (g *GRPC) examples(request []byte, method string) (*Servable, func(), string, map[string]*Tensor, error) {
	spec, err := decodeSpecOnly(request)
	if err != nil {
		return nil, nil, "", nil, err
	}
	sv, release, err := g.Store.Acquire(spec.Name, spec.Version, spec.Label)
	if err != nil {
		return nil, nil, "", nil, err
	}
	input, sig, name, err := examplesSignature(sv.Model, spec.SignatureName, method)
	if err != nil {
		release()
		return nil, nil, "", nil, err
	}
	limit := g.MaxElements
	if b, ok := g.Bounds(sig)[input]; ok && b < limit {
		limit = b
	}
	_, examples, err := decodeExamples(request, limit, g.MaxRequestBytes)
	if err != nil {
		release()
		return nil, nil, "", nil, err
	}
	t := &Tensor{DType: DTString, Shape: []int64{int64(len(examples))}, Strings: examples}
	outputs, err := g.Run(sv, name, sig, map[string]*Tensor{input: t})
	if err != nil {
		release()
		return nil, nil, "", nil, err
	}
	return sv, release, name, outputs, nil
}

func (g *GRPC) classify(request []byte) ([]byte, error) {
	sv, release, name, outputs, err := g.examples(request, classifyMethod)
	if err != nil {
		return nil, err
	}
	defer release()
	classes, scores := outputs["classes"], outputs["scores"]
	if classes == nil && scores == nil {
		return nil, invalid("the signature answers neither 'classes' nor 'scores'")
	}
	for _, t := range []*Tensor{classes, scores} {
		if t != nil && len(t.Shape) != 2 {
			return nil, invalid("Expected Tensor shape: [batch_size num_classes] but got %s", pyList(t.Shape))
		}
	}
	if classes != nil && classes.DType != DTString {
		return nil, invalid("Expected classes Tensor of DT_STRING. Got: %s", classes.DType)
	}
	return encodeClassifyResponse(g.Store.Name, sv.Version, name, classes, scores), nil
}

func pyList(shape []int64) string {
	out := "["
	for i, d := range shape {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprint(d)
	}
	return out + "]"
}

func (g *GRPC) regress(request []byte) ([]byte, error) {
	sv, release, name, outputs, err := g.examples(request, regressMethod)
	if err != nil {
		return nil, err
	}
	defer release()
	values := outputs["outputs"]
	if values == nil {
		return nil, invalid("the signature answers no 'outputs'")
	}
	return encodeRegressResponse(g.Store.Name, sv.Version, name, values)
}

func (g *GRPC) metadata(request []byte) ([]byte, error) {
	spec, wanted, err := decodeMetadataRequest(request)
	if err != nil {
		return nil, err
	}
	if spec.Name == "" {
		return nil, invalid("Missing model_spec")
	}
	if len(wanted) != 1 || wanted[0] != "signature_def" {
		names := ""
		for i, w := range wanted {
			if i > 0 {
				names += ", "
			}
			names += w
		}
		if names == "" {
			names = "none"
		}
		return nil, invalid("Metadata field signature_def is the only one supported; requested: %s", names)
	}
	sv, release, err := g.Store.Acquire(spec.Name, spec.Version, spec.Label)
	if err != nil {
		return nil, err
	}
	defer release()
	return encodeMetadataResponse(spec.Name, sv.Version, sv.Model.SignatureBytes), nil
}

func (g *GRPC) status(request []byte) ([]byte, error) {
	spec, err := decodeSpecOnly(request)
	if err != nil {
		return nil, err
	}
	chosen, err := g.chosenStatuses(spec.Name, spec.Version, spec.Label)
	if err != nil {
		return nil, err
	}
	return encodeStatusResponse(chosen), nil
}

// HealthProbe asks the gRPC door's own health check through the network.
type HealthProbe struct {
	target string
	conn   *grpc.ClientConn
}

// NewHealthProbe is a probe of host:port (the wildcard addresses by loopback).
func NewHealthProbe(host string, port int) (*HealthProbe, error) {
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::", "[::]":
		host = "::1"
	}
	target := net.JoinHostPort(host, fmt.Sprint(port))
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		return nil, err
	}
	return &HealthProbe{target: target, conn: conn}, nil
}

// Check is "" when the door answers SERVING, else why not.
func (p *HealthProbe) Check() string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	request, answer := []byte{}, []byte{}
	if err := p.conn.Invoke(ctx, healthCheck, &request, &answer); err != nil {
		return fmt.Sprintf("gRPC at %s: %s", p.target, codeName(status.Code(err)))
	}
	if len(answer) == 2 && answer[1] == 1 {
		return ""
	}
	return fmt.Sprintf("gRPC at %s: not serving", p.target)
}

func codeName(c codes.Code) string {
	return Code(c).String()
}
