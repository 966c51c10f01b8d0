package main

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// cpuTime is the process's CPU time so far (user and system): a benchmark's ns/op on a
// shared machine counts the waits for a core, its CPU time per op less so.
func cpuTime() int64 {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return u.Utime.Nano() + u.Stime.Nano()
}

// reportCPU adds cpu-ns/op to a benchmark started at `since` (cpuTime).
func reportCPU(b *testing.B, since int64) {
	b.ReportMetric(float64(cpuTime()-since)/float64(b.N), "cpu-ns/op")
}

func batch64() ([]byte, map[string]*Signature) {
	var rows []string
	for i := 0; i < 64; i++ {
		var vals []string
		for j := 0; j < 64; j++ {
			vals = append(vals, strconv.FormatFloat(float64(float32(i*64+j)/4096.0+0.123456), 'g', -1, 64))
		}
		rows = append(rows, "["+strings.Join(vals, ",")+"]")
	}
	body := []byte(`{"instances": [` + strings.Join(rows, ",") + `]}`)
	x := &TensorInfo{Key: "x", DType: DTFloat, Shape: []int64{-1, 64}, KnownRank: true}
	sig := &Signature{Inputs: map[string]*TensorInfo{"x": x}, Outputs: map[string]*TensorInfo{"y": x}}
	sig.inputList, sig.outputList = sortedInfos(sig.Inputs), sortedInfos(sig.Outputs)
	return body, map[string]*Signature{"serving_default": sig}
}

func BenchmarkParseBatch64(b *testing.B) {
	body, sigs := batch64()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	defer reportCPU(b, cpuTime())
	for i := 0; i < b.N; i++ {
		if _, err := ParsePredict(body, sigs, 1<<22, noBounds); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAnswerBatch64(b *testing.B) {
	p := &Tensor{DType: DTFloat, Shape: []int64{64, 10}}
	for i := 0; i < 640; i++ {
		p.Data = binary.LittleEndian.AppendUint32(p.Data, math.Float32bits(float32(i)/641.0))
	}
	c := &Tensor{DType: DTInt64, Shape: []int64{64}, Data: make([]byte, 512)}
	b.ResetTimer()
	defer reportCPU(b, cpuTime())
	for i := 0; i < b.N; i++ {
		if _, err := PredictAnswer(map[string]*Tensor{"probabilities": p, "classes": c}, true); err != nil {
			b.Fatal(err)
		}
	}
}
