package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

func signatures() map[string]*Signature {
	x := &TensorInfo{Key: "x", DType: DTFloat, Shape: []int64{-1, 2}, KnownRank: true}
	y := &TensorInfo{Key: "y", DType: DTFloat, Shape: []int64{-1, 2}, KnownRank: true}
	s := &TensorInfo{Key: "s", DType: DTString, Shape: []int64{-1}, KnownRank: true}
	n := &TensorInfo{Key: "n", DType: DTInt64, Shape: []int64{-1}, KnownRank: true}
	one := &Signature{Inputs: map[string]*TensorInfo{"x": x}, Outputs: map[string]*TensorInfo{"y": y}}
	two := &Signature{Inputs: map[string]*TensorInfo{"s": s, "n": n}, Outputs: map[string]*TensorInfo{"y": y}}
	for _, sig := range []*Signature{one, two} {
		sig.inputList, sig.outputList = sortedInfos(sig.Inputs), sortedInfos(sig.Outputs)
	}
	return map[string]*Signature{"serving_default": one, "two": two}
}

func noBounds(*Signature) map[string]int { return nil }

func floats(t *Tensor) []float32 {
	out := make([]float32, len(t.Data)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:]))
	}
	return out
}

func TestParsePredictRowsAndColumns(t *testing.T) {
	for _, body := range []string{
		`{"instances": [[1, 2.5], [3e0, -4]]}`,
		`{"inputs": [[1, 2.5], [3, -4]], "signature_name": "serving_default"}`,
		`{"instances": [{"x": [1, 2.5]}, {"x": [3, -4]}]}`,
		`{"inputs": {"x": [[1, 2.5], [3, -4]]}}`,
	} {
		got, err := ParsePredict([]byte(body), signatures(), 100, noBounds)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		x := got.Inputs["x"]
		if shapeString(x.Shape) != "[2,2]" || floats(x)[1] != 2.5 || floats(x)[3] != -4 {
			t.Errorf("%s: %v %v", body, x.Shape, floats(x))
		}
		if got.RowFormat != strings.Contains(body, "instances") {
			t.Errorf("%s: row format %v", body, got.RowFormat)
		}
	}
}

func TestParsePredictStringsAndInts(t *testing.T) {
	body := `{"signature_name": "two", "instances": [{"s": "a\u00e9\n", "n": 7}, {"s": {"b64": "AAE="}, "n": 9007199254740993}]}`
	got, err := ParsePredict([]byte(body), signatures(), 100, noBounds)
	if err != nil {
		t.Fatal(err)
	}
	s, n := got.Inputs["s"], got.Inputs["n"]
	if string(s.Strings[0]) != "a\u00e9\n" || string(s.Strings[1]) != "\x00\x01" {
		t.Errorf("strings %q", s.Strings)
	}
	if v := int64(binary.LittleEndian.Uint64(n.Data[8:])); v != 9007199254740993 {
		t.Errorf("int64 read through a float: %d", v)
	}
}

func TestParsePredictErrors(t *testing.T) {
	cases := map[string]string{
		`{"instances": [[1], [1, 2]]}`:               "ragged",
		`{"instances": [[1, 2], 3]}`:                 "ragged",
		`{"instances": [[1, 2]], "inputs": [[1,2]]}`: "only one of",
		`{}`:                          "Missing 'inputs' or 'instances' key",
		`{"instances": []}`:           "non-empty list",
		`{"instances": [["a", "b"]]}`: "not numbers",
		`{"instances": [[1, 2]`:       "JSON Parse error",
		`[1]`:                         "must be a JSON object",
		`{"signature_name": "nope", "inputs": 1}`:                       "'nope' not found",
		`{"inputs": [[1, 2, 3]]}`:                                       "expected shape [?,2], got [1,3]",
		`{"inputs": {"z": [[1, 2]]}}`:                                   "unknown input(s) z; missing input(s) x",
		`{"instances": [[1, 2], [3, 4], [5, 6]]}`:                       "at most 4",
		`{"signature_name": "two", "inputs": {"s": ["a"], "n": [1.5]}}`: "fractions",
	}
	for body, words := range cases {
		_, err := ParsePredict([]byte(body), signatures(), 4, noBounds)
		if err == nil || !strings.Contains(err.Error(), words) {
			t.Errorf("%s: %v, want %q", body, err, words)
		}
		if se, ok := err.(*ServingError); ok && se.Code != CodeInvalidArgument {
			t.Errorf("%s: code %v", body, se.Code)
		}
	}
}

func TestPredictAnswer(t *testing.T) {
	y := &Tensor{DType: DTFloat, Shape: []int64{2, 2}}
	for _, f := range []float32{1, 2.5, float32(math.Inf(1)), 0.1} {
		y.Data = binary.LittleEndian.AppendUint32(y.Data, math.Float32bits(f))
	}
	v := &Tensor{DType: DTInt64, Shape: []int64{2}, Data: make([]byte, 16)}
	v.Data[0], v.Data[8] = 2, 2
	rows, _ := PredictAnswer(map[string]*Tensor{"y": y, "version": v}, true)
	want := `{"predictions":[{"version":2,"y":[1.0,2.5]},{"version":2,"y":[Infinity,0.1]}]}`
	if string(rows) != want {
		t.Errorf("rows: %s", rows)
	}
	cols, _ := PredictAnswer(map[string]*Tensor{"y": y}, false)
	if string(cols) != `{"outputs":[[1.0,2.5],[Infinity,0.1]]}` {
		t.Errorf("columns: %s", cols)
	}
	b := &Tensor{DType: DTString, Shape: []int64{1}, Strings: [][]byte{{0xff, 'a', '"'}}}
	out, _ := PredictAnswer(map[string]*Tensor{"out_bytes": b, "text": b}, false)
	if string(out) != "{\"outputs\":{\"out_bytes\":[{\"b64\":\"/2Ei\"}],\"text\":[\"\ufffda\\\"\"]}}" {
		t.Errorf("strings: %s", out)
	}
}

func TestTensorWire(t *testing.T) {
	in := &Tensor{DType: DTFloat, Shape: []int64{2, 0, 3}}
	back, err := decodeTensor(encodeTensor(in), 10)
	if err != nil || shapeString(back.Shape) != "[2,0,3]" || len(back.Data) != 0 {
		t.Fatalf("%v %v", back, err)
	}
	x := &Tensor{DType: DTInt32, Shape: []int64{3}, Data: []byte{1, 0, 0, 0, 2, 0, 0, 0, 255, 255, 255, 255}}
	back, err = decodeTensor(encodeTensor(x), 10)
	if err != nil || string(back.Data) != string(x.Data) {
		t.Fatalf("%v %v", back, err)
	}
	// float_val, packed, one value broadcast over the shape
	msg := appendVarintField(nil, 1, uint64(DTFloat))
	msg = appendBytesField(msg, 2, encodeShape([]int64{2, 2}))
	msg = appendBytesField(msg, 5, binary.LittleEndian.AppendUint32(nil, math.Float32bits(1.5)))
	back, err = decodeTensor(msg, 10)
	if err != nil || floats(back)[3] != 1.5 {
		t.Fatalf("%v %v", back, err)
	}
	if _, err := decodeTensor(msg, 3); err == nil || !strings.Contains(err.Error(), "at most 3") {
		t.Errorf("the element cap: %v", err)
	}
}

func TestSpecAndPredictRequest(t *testing.T) {
	v := int64(7)
	spec := encodeSpec("m", &v, "sig")
	spec = appendStringField(spec, 4, "canary")
	req := appendBytesField(nil, 1, spec)
	entry := appendStringField(nil, 1, "x")
	entry = appendBytesField(entry, 2, encodeTensor(&Tensor{DType: DTString, Shape: []int64{1}, Strings: [][]byte{[]byte("e")}}))
	req = appendBytesField(req, 2, entry)
	req = appendStringField(req, 3, "y")
	call, err := decodePredict(req)
	if err != nil {
		t.Fatal(err)
	}
	if call.Spec.Name != "m" || *call.Spec.Version != 7 || call.Spec.SignatureName != "sig" || call.Spec.Label != "canary" {
		t.Errorf("spec %+v", call.Spec)
	}
	if len(call.Tensors) != 1 || len(call.OutputFilter) != 1 {
		t.Errorf("call %+v", call)
	}
	if _, err := decodePredict([]byte{0x0a, 0x05, 0x01}); err == nil {
		t.Error("a truncated message was read")
	}
}

func TestPolicy(t *testing.T) {
	cases := map[string]string{"latest": "[5]", "latest:2": "[5 3]", "all": "[5 3 1]", "specific:1,3": "[3 1]", "3": "[3]"}
	for text, want := range cases {
		p, err := ParsePolicy(text)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(p.Serve([]int64{1, 3, 5})); got != want {
			t.Errorf("%s: %s, want %s", text, got, want)
		}
	}
	for _, bad := range []string{"latest:0", "specific:", "newest"} {
		if _, err := ParsePolicy(bad); err == nil {
			t.Errorf("%s was read", bad)
		}
	}
	load, unload := PlanVersions([]int64{3}, map[int64]bool{1: true, 2: true}, map[int64]bool{})
	if fmtInts(load) != "[3]" || fmtInts(unload) != "[1]" {
		t.Errorf("nothing wanted is up yet: load %v unload %v", load, unload)
	}
	load, unload = PlanVersions([]int64{3}, map[int64]bool{2: true, 3: true}, nil)
	if len(load) != 0 || fmtInts(unload) != "[2]" {
		t.Errorf("load %v unload %v", load, unload)
	}
	labels := map[string]int64{"stable": 1, "canary": 2}
	weights := map[string]int64{"stable": 1, "canary": 3}
	up := map[int64]bool{1: true, 2: true}
	if SplitLabel(weights, labels, up, 0.1) != "canary" || SplitLabel(weights, labels, up, 0.9) != "stable" {
		t.Error("the split")
	}
	if SplitLabel(weights, labels, map[int64]bool{1: true}, 0.1) != "stable" {
		t.Error("a label whose version is down takes no share")
	}
	if _, err := ParsePairs("a=1,a=2", "a label"); err == nil {
		t.Error("a label given twice")
	}
}

func fmtInts(v []int64) string { return fmt.Sprint(v) }

func TestBatching(t *testing.T) {
	p := BatchingParameters{MaxBatchSize: 4, BatchTimeoutMicros: 1000, NumBatchThreads: 1, MaxEnqueuedBatches: 1}
	if n, _, ok := PlanBatch([]int{2, 2, 1}, 0, p); !ok || n != 2 {
		t.Errorf("full: %d %v", n, ok)
	}
	if _, wait, ok := PlanBatch([]int{1}, 0, p); ok || wait != time.Millisecond {
		t.Errorf("waits: %v %v", wait, ok)
	}
	if n, _, ok := PlanBatch([]int{1}, 2*time.Millisecond, p); !ok || n != 1 {
		t.Errorf("timed out: %d %v", n, ok)
	}
	parsed, err := ParseBatching("max_batch_size { value: 8 }\n# a comment\nallowed_batch_sizes: 4\nallowed_batch_sizes: 8\nnum_batch_threads { value: 2 }")
	if err != nil || parsed.MaxBatchSize != 8 || parsed.NumBatchThreads != 2 || PaddedSize(3, parsed) != 4 {
		t.Errorf("%+v %v", parsed, err)
	}
	if _, err := ParseBatching("allowed_batch_sizes: 4"); err == nil {
		t.Error("allowed sizes not ending at max_batch_size")
	}
	a := &Tensor{DType: DTInt8, Shape: []int64{1, 2}, Data: []byte{1, 2}}
	b := &Tensor{DType: DTInt8, Shape: []int64{2, 2}, Data: []byte{3, 4, 5, 6}}
	c := Concat([]*Tensor{a, b}, 4)
	if shapeString(c.Shape) != "[4,2]" || string(c.Data) != string([]byte{1, 2, 3, 4, 5, 6, 1, 2}) {
		t.Errorf("concat %v %v", c.Shape, c.Data)
	}
	if s := c.Slice(1, 3); string(s.Data) != string([]byte{3, 4, 5, 6}) {
		t.Errorf("slice %v", s.Data)
	}
	batcher := NewBatcher(BatchingParameters{MaxBatchSize: 8, NumBatchThreads: 1, MaxEnqueuedBatches: 2})
	double := func(in map[string]*Tensor) (map[string]*Tensor, error) {
		x := in["x"]
		out := &Tensor{DType: DTInt8, Shape: x.Shape, Data: make([]byte, len(x.Data))}
		for i, v := range x.Data {
			out.Data[i] = 2 * v
		}
		return map[string]*Tensor{"y": out}, nil
	}
	done := make(chan string, 8)
	for i := 1; i <= 8; i++ {
		go func(i int) {
			x := &Tensor{DType: DTInt8, Shape: []int64{1, 1}, Data: []byte{byte(i)}}
			out, err := batcher.Submit("k", double, map[string]*Tensor{"x": x})
			if err != nil || out["y"].Data[0] != byte(2*i) {
				done <- "wrong rows"
				return
			}
			done <- ""
		}(i)
	}
	for i := 0; i < 8; i++ {
		if msg := <-done; msg != "" {
			t.Error(msg)
		}
	}
	big := &Tensor{DType: DTInt8, Shape: []int64{9, 1}, Data: make([]byte, 9)}
	if _, err := batcher.Submit("k", double, map[string]*Tensor{"x": big}); err == nil || !strings.Contains(err.Error(), "maximum input batch size 8") {
		t.Errorf("a task over max_batch_size: %v", err)
	}
}

func TestRecords(t *testing.T) {
	var file []byte
	for _, r := range []string{"one", "two"} {
		file = binary.LittleEndian.AppendUint64(file, uint64(len(r)))
		file = append(file, 0, 0, 0, 0)
		file = append(file, r...)
		file = append(file, 0, 0, 0, 0)
	}
	got := tfRecords(append(file, 9, 9))
	if len(got) != 2 || string(got[1]) != "two" {
		t.Errorf("%q", got)
	}
	log := appendBytesField(nil, 6, appendBytesField(nil, 1, []byte("req")))
	if kind, req := predictionLog(log); kind != "predict" || string(req) != "req" {
		t.Errorf("%s %q", kind, req)
	}
}

func TestFastNumberFloat32(t *testing.T) {
	for _, text := range []string{"0.10000000149011612", "0.8093218207359314", "-3.4028234663852886e22", "1234567.125"} {
		want, _ := strconv.ParseFloat(text, 64)
		got, _, ok := fastNumber([]byte(text), true)
		if !ok || float32(got) != float32(want) {
			t.Errorf("%s: %v (%v), want %v", text, float32(got), ok, float32(want))
		}
	}
}

func TestFastNumberAgreesWithStrconv(t *testing.T) {
	for _, text := range []string{"0", "-0", "1", "0.5", "0.8093218207359314", "-12.25e-3", "1e22", "123456789012345678",
		"3.14159", "1E5", "9007199254740993", "0.1", "-0.000001", "7e-22", "1.7976931348623157e308"} {
		want, _ := strconv.ParseFloat(text, 64)
		got, n, ok := fastNumber([]byte(text+","), false)
		if ok && (got != want || n != len(text)) {
			t.Errorf("%s: %v (%d), want %v", text, got, n, want)
		}
	}
	for _, bad := range []string{"01", "1.", ".5", "1e", "-", "1x", "+1"} {
		if _, _, ok := fastNumber([]byte(bad), false); ok {
			t.Errorf("%s was read", bad)
		}
	}
}

func TestEightDigits(t *testing.T) {
	for _, text := range []string{"00000000", "12345678", "99999999", "00000001", "10000000", "80932182"} {
		want, _ := strconv.ParseUint(text, 10, 64)
		if got, ok := eightDigits([]byte(text)); !ok || got != want {
			t.Errorf("%s: %d %v", text, got, ok)
		}
	}
	for _, bad := range []string{"1234567.", "/2345678", ":2345678", "1234 678", "12345e78", "\xb0\xb1\xb2\xb3\xb4\xb5\xb6\xb7"} {
		if _, ok := eightDigits([]byte(bad)); ok {
			t.Errorf("%q was read", bad)
		}
	}
}

// fastNumber (eight digits at a time) gives what the digit-by-digit reading gave: the
// value strconv reads, or no fast answer for more than 19 significant digits.
func TestFastNumberRandomAgreesWithStrconv(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		var text string
		switch i % 4 {
		case 0:
			text = strconv.FormatFloat(float64(float32(rng.Float64())), 'g', -1, 64)
		case 1:
			text = strconv.FormatFloat(rng.NormFloat64()*math.Pow(10, float64(rng.IntN(30)-15)), 'g', -1, 64)
		case 2:
			text = strconv.FormatUint(rng.Uint64()>>rng.IntN(64), 10)
		default:
			text = strings.Repeat("0", rng.IntN(3)) + "." + strconv.FormatUint(rng.Uint64(), 10)
			text = "0" + text[strings.IndexByte(text, '.'):]
		}
		got, n, ok := fastNumber([]byte(text+"]"), false)
		want, _ := strconv.ParseFloat(text, 64)
		if ok && (got != want || n != len(text)) {
			t.Fatalf("%s: %v (%d), want %v", text, got, n, want)
		}
		digits := len(strings.TrimLeft(strings.NewReplacer("-", "", ".", "").Replace(strings.SplitN(strings.ToLower(text), "e", 2)[0]), "0"))
		if !ok && digits <= 15 && !strings.ContainsAny(text, "eE") {
			t.Fatalf("%s: no fast answer", text)
		}
		if f32, _, ok := fastNumber([]byte(text), true); ok && float32(f32) != float32(want) {
			t.Fatalf("%s as float32: %v, want %v", text, float32(f32), float32(want))
		}
	}
}

// ParsePredict's one-pass reading answers as the general reader does, or leaves the body to it.
func TestFastPredictAgreesWithGeneralReader(t *testing.T) {
	bodies := []string{
		`{"instances": [[1, 2.5], [3e0, -4]]}`,
		` { "instances" : [ [ 1 , 2.5 ] , [ 3 , -4 ] ] } `,
		`{"signature_name": "serving_default", "instances": [[1, 2], [3, 4]]}`,
		`{"signature_name": null, "instances": [[1, 2]]}`,
		`{"signature_name": "", "instances": [[1, 2]]}`,
		`{"instances": [[1, 2]], "signature_name": "serving_default"}`,
		`{"signature_name": "two", "instances": [[1, 2]]}`,
		`{"signature_name": "nope", "instances": [[1, 2]]}`,
		`{"signature_name": 3, "instances": [[1, 2]]}`,
		`{"other": {"a": [1, "b"]}, "instances": [[1, 2]], "more": null}`,
		`{"instances": [[1, 2]], "instances": [[3, 4]]}`,
		`{"instances": [[1, 2]], "inputs": [[1, 2]]}`,
		`{"instances": [[1], [1, 2]]}`,
		`{"instances": [[1, 2], 3]}`,
		`{"instances": []}`,
		`{"instances": [{"x": [1, 2]}]}`,
		`{"instances": [["a", "b"]]}`,
		`{"instances": [[1, 2]]`,
		`{"instances": [[1, 2]]} x`,
		`{"instances": [[1, 2], [3, 4], [5, 6]]}`,
		`{"instances": [[1, 2, 3]]}`,
		`{"instances": [1, 2]}`,
		`{"instances": [[NaN, -Infinity]]}`,
		`{"instances": [[0.10000000149011612, 1e400]]}`,
		`{"instances": [[01, 2]]}`,
		`{"instan\u0063es": [[1, 2]]}`,
		`{"instances": 5}`,
		`{}`,
		`[]`,
	}
	for _, body := range bodies {
		fast, ok := fastPredict([]byte(body), signatures(), 4, noBounds)
		general, err := parsePredict([]byte(body), signatures(), 4, noBounds)
		whole, wholeErr := ParsePredict([]byte(body), signatures(), 4, noBounds)
		if fmt.Sprint(whole, wholeErr) != fmt.Sprint(general, err) && (wholeErr != nil || err != nil) {
			t.Errorf("%s: %v, general reader %v", body, wholeErr, err)
		}
		if !ok {
			continue
		}
		if err != nil {
			t.Errorf("%s: read in one pass, but the general reader says %v", body, err)
			continue
		}
		f, g := fast.Inputs["x"], general.Inputs["x"]
		if fast.Signature != general.Signature || fast.RowFormat != general.RowFormat || len(fast.Inputs) != len(general.Inputs) ||
			shapeString(f.Shape) != shapeString(g.Shape) || string(f.Data) != string(g.Data) {
			t.Errorf("%s: one pass %+v %v, general %+v %v", body, fast, f, general, g)
		}
	}
	if _, ok := fastPredict([]byte(bodies[0]), signatures(), 4, noBounds); !ok {
		t.Error("the common body was not read in one pass")
	}
}

func TestBodyBuffers(t *testing.T) {
	b := bodyBuffer(100)
	if len(b) != 100 {
		t.Fatalf("len %d", len(b))
	}
	releaseBody(b)
	if big := bodyBuffer(pooledBody + 1); len(big) != pooledBody+1 {
		t.Fatalf("len %d", len(big))
	}
	numbers := map[string]*Tensor{"x": {DType: DTFloat}}
	strings := map[string]*Tensor{"x": {DType: DTFloat}, "s": {DType: DTString}}
	if !bodyFree(numbers) || bodyFree(strings) {
		t.Error("bodyFree")
	}
	// string values read from a body point into it: such a body is not reused
	got, err := ParsePredict([]byte(`{"signature_name": "two", "inputs": {"s": ["abc"], "n": [1]}}`), signatures(), 100, noBounds)
	if err != nil || bodyFree(got.Inputs) {
		t.Fatalf("%v %v", got, err)
	}
}

func TestIntraOpThreadsDefaultsToOneOnSmallMachines(t *testing.T) {
	for _, c := range []struct{ flag, cpus, want int }{
		{0, 1, 1}, {0, 2, 1}, {0, 3, 0}, {0, 64, 0}, {2, 2, 2}, {4, 1, 4}, {1, 16, 1},
	} {
		if got := intraOpThreads(c.flag, c.cpus); got != c.want {
			t.Errorf("intraOpThreads(%d, %d) = %d, want %d", c.flag, c.cpus, got, c.want)
		}
	}
}

func TestGCSettings(t *testing.T) {
	for _, c := range []struct {
		text string
		want int64
	}{
		{"max\n", 0}, {"9223372036854771712\n", 0}, {"", 0}, {"junk", 0}, {"-1", 0},
		{"1073741824\n", 1 << 30},
	} {
		if got := memoryLimit(c.text); got != c.want {
			t.Errorf("memoryLimit(%q) = %d, want %d", c.text, got, c.want)
		}
	}
	if p, m, ok := gcSettings("", "", 0); !ok || p != gcPercent || m != 0 {
		t.Errorf("no limit: %d %d %v", p, m, ok)
	}
	if p, m, ok := gcSettings("", "", 1<<30); !ok || p != gcPercent || m != 1<<29 {
		t.Errorf("a 1 GiB limit: %d %d %v", p, m, ok)
	}
	for _, env := range [][2]string{{"100", ""}, {"", "512MiB"}, {"off", "1GiB"}} {
		if _, _, ok := gcSettings(env[0], env[1], 1<<30); ok {
			t.Errorf("GOGC=%q GOMEMLIMIT=%q: set anyway", env[0], env[1])
		}
	}
}
