package main

// What both doors ask of the model: the signature, inputs checked against it, the call
// run through the batcher (or at once when batching is off), outputs back.

import (
	"os"
	"path/filepath"
	"strconv"
)

const (
	classifyMethod = "tensorflow/serving/classify"
	regressMethod  = "tensorflow/serving/regress"
)

// Server is the model server's state shared by its doors.
type Server struct {
	Store           *Store
	Batcher         *Batcher
	MaxElements     int
	MaxRequestBytes int
}

func signatureOf(m *Model, name string) (*Signature, string, error) {
	if name == "" {
		name = "serving_default"
	}
	sig, ok := m.Signatures[name]
	if !ok {
		return nil, name, unknownSignature(name, m.Signatures)
	}
	return sig, name, nil
}

// Bounds is the most elements each input of a signature may take in one request: its
// whole shape's when known; max_batch_size rows when only the first dimension is
// unknown and batching is on.
func (s *Server) Bounds(sig *Signature) map[string]int {
	out := map[string]int{}
	for name, info := range sig.Inputs {
		if !info.KnownRank || len(info.Shape) == 0 {
			continue
		}
		row, known := 1, true
		for _, d := range info.Shape[1:] {
			if d < 0 {
				known = false
			}
			row *= int(d)
		}
		if !known {
			continue
		}
		if info.Shape[0] >= 0 {
			out[name] = int(info.Shape[0]) * row
		} else if s.Batcher != nil {
			out[name] = s.Batcher.params.MaxBatchSize * row
		}
	}
	return out
}

// Run is the model call, batched with others of the same version and signature.
func (s *Server) Run(sv *Servable, sigName string, sig *Signature, inputs map[string]*Tensor) (map[string]*Tensor, error) {
	run := func(batch map[string]*Tensor) (map[string]*Tensor, error) {
		return sv.Model.Run(sig, batch)
	}
	if s.Batcher == nil {
		return run(inputs)
	}
	return s.Batcher.Submit(strconv.FormatInt(sv.Version, 10)+"/"+sigName, run, inputs)
}

// checkedInputs: gRPC tensors against the signature (names, dtypes, shapes).
func checkedInputs(inputs map[string]*Tensor, sig *Signature) error {
	for _, k := range sortedKeys(inputs) {
		t, info := inputs[k], sig.Inputs[k]
		if t.DType != info.DType {
			return invalid("Expects arg '%s' to be %s but %s is provided", k, info.DType, t.DType)
		}
		if !info.Fits(t.Shape) {
			return invalid("input '%s': expected shape %s, got %s", k, info.ShapeText(), shapeString(t.Shape))
		}
	}
	return nil
}

// examplesSignature: a Classify or Regress signature takes one string tensor.
func examplesSignature(m *Model, name, method string) (string, *Signature, string, error) {
	sig, name, err := signatureOf(m, name)
	if err != nil {
		return "", nil, name, err
	}
	if sig.MethodName != method {
		kind := method[len("tensorflow/serving/"):]
		kind = string(kind[0]-32) + kind[1:]
		return "", nil, name, invalid("Expected %s signature method_name to be %s. Was: %s", kind, method, sig.MethodName)
	}
	if len(sig.inputList) != 1 {
		return "", nil, name, invalid("Expected one input Tensor.")
	}
	if sig.inputList[0].DType != DTString {
		return "", nil, name, invalid("the signature's input is not a string tensor")
	}
	return sig.inputList[0].Key, sig, name, nil
}

// WarmUp replays assets.extra/tf_serving_warmup_requests against a loaded version.
func (s *Server) WarmUp(m *Model, dir string) (int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "assets.extra", "tf_serving_warmup_requests"))
	if err != nil {
		return 0, nil
	}
	ran := 0
	for _, record := range tfRecords(data) {
		if ran >= 1000 {
			break
		}
		kind, request := predictionLog(record)
		switch kind {
		case "predict":
			call, err := decodePredict(request)
			if err != nil {
				return ran, err
			}
			sig, _, err := signatureOf(m, call.Spec.SignatureName)
			if err != nil {
				return ran, err
			}
			inputs := map[string]*Tensor{}
			for k, v := range call.Tensors {
				t, err := decodeTensor(v, s.MaxElements)
				if err != nil {
					return ran, err
				}
				inputs[k] = t
			}
			if _, err := m.Run(sig, inputs); err != nil {
				return ran, err
			}
		case "classify", "regress":
			spec, examples, err := decodeExamples(request, s.MaxElements, s.MaxRequestBytes)
			if err != nil {
				return ran, err
			}
			sig, ok := m.Signatures[orDefault(spec.SignatureName)]
			if !ok || len(sig.inputList) != 1 {
				return ran, invalid("warm-up: no %s signature '%s'", kind, orDefault(spec.SignatureName))
			}
			t := &Tensor{DType: DTString, Shape: []int64{int64(len(examples))}, Strings: examples}
			if _, err := m.Run(sig, map[string]*Tensor{sig.inputList[0].Key: t}); err != nil {
				return ran, err
			}
		default:
			continue
		}
		ran++
	}
	return ran, nil
}

func orDefault(name string) string {
	if name == "" {
		return "serving_default"
	}
	return name
}
