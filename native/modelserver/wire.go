package main

// TensorFlow Serving's messages on the wire, read and written with protowire (no generated
// code: the field numbers of its public .proto files are the interface).

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"
)

func malformed(what string) *ServingError {
	return invalid("malformed request: %s", what)
}

// eachField calls fn for each field of a message: its number, wire type, the varint or
// fixed value (as uint64) and the bytes of a length-delimited one.
func eachField(buf []byte, fn func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error) error {
	for len(buf) > 0 {
		num, typ, n := protowire.ConsumeTag(buf)
		if n < 0 {
			return varintError(buf)
		}
		if num == 0 {
			return malformed("field number 0")
		}
		buf = buf[n:]
		var v uint64
		var b []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(buf)
		case protowire.Fixed32Type:
			var x uint32
			x, n = protowire.ConsumeFixed32(buf)
			v = uint64(x)
		case protowire.Fixed64Type:
			v, n = protowire.ConsumeFixed64(buf)
		case protowire.BytesType:
			b, n = protowire.ConsumeBytes(buf)
		default:
			return malformed(fmt.Sprintf("field %d of wire type %d", num, typ))
		}
		if n < 0 {
			if typ == protowire.VarintType {
				return varintError(buf)
			}
			return malformed("a truncated field")
		}
		buf = buf[n:]
		if err := fn(num, typ, v, b); err != nil {
			return err
		}
	}
	return nil
}

// firstVarint is field 1 of a message when a varint (an Int64Value's value, a Dim's size).
func firstVarint(buf []byte) (uint64, error) {
	var v uint64
	err := eachField(buf, func(n protowire.Number, t protowire.Type, x uint64, _ []byte) error {
		if n == 1 && t == protowire.VarintType {
			v = x
		}
		return nil
	})
	return v, err
}

// varintError tells a varint over 64 bits from one the message cuts short.
func varintError(buf []byte) *ServingError {
	for i := 0; i < len(buf) && i < 10; i++ {
		if buf[i] < 0x80 {
			return malformed("a varint over 64 bits")
		}
	}
	if len(buf) >= 10 {
		return malformed("a varint over 64 bits")
	}
	return malformed("a truncated field")
}

// wantMessage refuses a number where a message (or text) belongs.
func wantMessage(num protowire.Number, typ protowire.Type) error {
	if typ != protowire.BytesType {
		return malformed(fmt.Sprintf("field %d is a number where a message belongs", num))
	}
	return nil
}

// mapEntry reads a map entry {1: key, 2: value}.
func mapEntry(buf []byte) (string, []byte, error) {
	var key string
	var value []byte
	err := eachField(buf, func(num protowire.Number, typ protowire.Type, _ uint64, b []byte) error {
		if typ == protowire.BytesType {
			if num == 1 {
				key = string(b)
			} else if num == 2 {
				value = b
			}
		}
		return nil
	})
	return key, value, err
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendStringField(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// -- ModelSpec ------------------------------------------------------------------------

// ModelSpec is {1: name, 2: Int64Value version, 3: signature_name, 4: version_label}.
type ModelSpec struct {
	Name          string
	Version       *int64
	SignatureName string
	Label         string
}

// eachBytesField calls fn with each length-delimited field of buf; a field numbered 1..last
// of another wire type is refused (wantMessage), any other is skipped.
func eachBytesField(buf []byte, last protowire.Number, fn func(num protowire.Number, b []byte) error) error {
	return eachField(buf, func(num protowire.Number, typ protowire.Type, _ uint64, b []byte) error {
		if typ != protowire.BytesType {
			if num >= 1 && num <= last {
				return wantMessage(num, typ)
			}
			return nil
		}
		return fn(num, b)
	})
}

// eachRequestField reads a request whose field 1 is its model_spec; fn gets its other
// length-delimited fields (eachBytesField's rules for 1..last).
func eachRequestField(buf []byte, last protowire.Number, fn func(num protowire.Number, b []byte) error) (ModelSpec, error) {
	var spec ModelSpec
	err := eachBytesField(buf, last, func(num protowire.Number, b []byte) error {
		if num == 1 {
			s, err := decodeSpec(b)
			spec = s
			return err
		}
		return fn(num, b)
	})
	return spec, err
}

func decodeSpec(buf []byte) (ModelSpec, error) {
	var s ModelSpec
	err := eachBytesField(buf, 4, func(num protowire.Number, b []byte) error {
		switch num {
		case 1:
			s.Name = string(b)
		case 2:
			x, err := firstVarint(b)
			if err != nil {
				return err
			}
			v := int64(x)
			s.Version = &v
		case 3:
			s.SignatureName = string(b)
		case 4:
			s.Label = string(b)
		}
		return nil
	})
	return s, err
}

func encodeSpec(name string, version *int64, signatureName string) []byte {
	b := appendStringField(nil, 1, name)
	if version != nil {
		b = appendBytesField(b, 2, appendVarintField(nil, 1, uint64(*version)))
	}
	return appendStringField(b, 3, signatureName)
}

// -- tensors ----------------------------------------------------------------------------

type tensorParts struct {
	dtype   DType
	shape   []int64
	content []byte
	has     bool
	varints []uint64
	fixed32 []uint32
	fixed64 []uint64
	strings [][]byte
}

func readShape(buf []byte) ([]int64, error) {
	shape := []int64{}
	err := eachField(buf, func(num protowire.Number, typ protowire.Type, _ uint64, b []byte) error {
		if num == 2 && typ == protowire.BytesType {
			size, err := firstVarint(b)
			if err != nil {
				return err
			}
			if len(shape) == 32 {
				return invalid("a tensor of more than 32 dimensions")
			}
			shape = append(shape, int64(size))
		}
		return nil
	})
	return shape, err
}

func tooMany(n, limit int) *ServingError {
	return invalid("the request holds over %d elements; this model server takes at most %d in one request (--max_request_elements)", n, limit)
}

// decodeTensor reads a TensorProto (tensor_content, or the *_val fields), refusing more
// than maxElements elements before any is made.
func decodeTensor(buf []byte, maxElements int) (*Tensor, error) {
	var p tensorParts
	counted := 0
	count := func(more int) error {
		counted += more
		if counted > maxElements {
			return tooMany(counted, maxElements)
		}
		return nil
	}
	err := eachField(buf, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error {
		switch {
		case num == 1 && typ == protowire.VarintType:
			p.dtype = DType(v)
		case num == 2 && typ == protowire.BytesType:
			s, err := readShape(b)
			if err != nil {
				return err
			}
			p.shape = s
		case num == 4 && typ == protowire.BytesType:
			p.content, p.has = b, true
		case num == 8 && typ == protowire.BytesType:
			if err := count(1); err != nil {
				return err
			}
			p.strings = append(p.strings, b)
		case num == 5:
			return readRepeated(&p, num, typ, v, b, 4, count)
		case num == 6:
			return readRepeated(&p, num, typ, v, b, 8, count)
		case num == 7 || num == 10 || num == 11 || num == 13 || num == 16 || num == 17:
			return readRepeated(&p, num, typ, v, b, 0, count)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	size := 1
	for _, d := range p.shape {
		if d < 0 {
			return nil, invalid("a tensor's shape has a negative dimension")
		}
		if d > 0 && size > maxElements/int(d) {
			return nil, tooMany(maxElements+1, maxElements)
		}
		size *= int(d)
	}
	if size > maxElements {
		return nil, tooMany(size, maxElements)
	}
	t := &Tensor{DType: p.dtype, Shape: p.shape}
	if p.dtype == DTString {
		switch {
		case len(p.strings) == size:
			t.Strings = p.strings
		case len(p.strings) == 1:
			t.Strings = make([][]byte, size)
			for i := range t.Strings {
				t.Strings[i] = p.strings[0]
			}
		default:
			return nil, invalid("a tensor of %d strings for a shape of %d elements", len(p.strings), size)
		}
		return t, nil
	}
	width := p.dtype.Size()
	if width == 0 {
		return nil, invalid("tensors of %s are not served", p.dtype)
	}
	if p.has {
		if len(p.content) != size*width {
			return nil, invalid("tensor_content holds %d bytes, not the %d of its shape", len(p.content), size*width)
		}
		t.Data = append([]byte(nil), p.content...)
		return t, nil
	}
	values := make([]byte, 0, size*width)
	n := 0
	switch p.dtype {
	case DTFloat:
		for _, x := range p.fixed32 {
			values = binary.LittleEndian.AppendUint32(values, x)
		}
		n = len(p.fixed32)
	case DTDouble:
		for _, x := range p.fixed64 {
			values = binary.LittleEndian.AppendUint64(values, x)
		}
		n = len(p.fixed64)
	case DTComplex64, DTComplex128:
		return nil, invalid("tensors of %s are served as tensor_content only", p.dtype)
	default:
		for _, x := range p.varints {
			switch width {
			case 1:
				values = append(values, byte(x))
			case 2:
				values = binary.LittleEndian.AppendUint16(values, uint16(x))
			case 4:
				values = binary.LittleEndian.AppendUint32(values, uint32(x))
			case 8:
				values = binary.LittleEndian.AppendUint64(values, x)
			}
		}
		n = len(p.varints)
	}
	switch {
	case n == size:
	case n == 1 && size > 1: // one value stands for all (TensorFlow's rule)
		one := values[:width]
		values = make([]byte, 0, size*width)
		for i := 0; i < size; i++ {
			values = append(values, one...)
		}
	case n == 0:
		values = make([]byte, size*width)
	default:
		return nil, invalid("a tensor of %d values for a shape of %d elements", n, size)
	}
	t.Data = values
	return t, nil
}

func readRepeated(p *tensorParts, num protowire.Number, typ protowire.Type, v uint64, b []byte, fixed int, count func(int) error) error {
	wrong := (typ == protowire.Fixed32Type && fixed != 4) || (typ == protowire.Fixed64Type && fixed != 8) ||
		(typ == protowire.VarintType && fixed != 0)
	if wrong {
		return malformed(fmt.Sprintf("field %d of wire type %d", num, typ))
	}
	switch typ {
	case protowire.BytesType: // packed
		switch fixed {
		case 4, 8:
			if len(b)%fixed != 0 {
				return malformed("a packed field of odd length")
			}
			if err := count(len(b) / fixed); err != nil {
				return err
			}
			for i := 0; i < len(b); i += fixed {
				if fixed == 4 {
					p.fixed32 = append(p.fixed32, binary.LittleEndian.Uint32(b[i:]))
				} else {
					p.fixed64 = append(p.fixed64, binary.LittleEndian.Uint64(b[i:]))
				}
			}
		default:
			for len(b) > 0 {
				x, n := protowire.ConsumeVarint(b)
				if n < 0 {
					return malformed("a truncated varint")
				}
				if err := count(1); err != nil {
					return err
				}
				p.varints = append(p.varints, x)
				b = b[n:]
			}
		}
	case protowire.Fixed32Type:
		if err := count(1); err != nil {
			return err
		}
		p.fixed32 = append(p.fixed32, uint32(v))
	case protowire.Fixed64Type:
		if err := count(1); err != nil {
			return err
		}
		p.fixed64 = append(p.fixed64, v)
	case protowire.VarintType:
		if err := count(1); err != nil {
			return err
		}
		p.varints = append(p.varints, v)
	}
	return nil
}

func encodeShape(shape []int64) []byte {
	var b []byte
	for _, d := range shape {
		var dim []byte
		if d != 0 {
			dim = protowire.AppendTag(dim, 1, protowire.VarintType)
			dim = protowire.AppendVarint(dim, uint64(d))
		}
		b = appendBytesField(b, 2, dim)
	}
	return b
}

func encodeTensor(t *Tensor) []byte {
	b := appendVarintField(nil, 1, uint64(t.DType))
	b = appendBytesField(b, 2, encodeShape(t.Shape))
	if t.DType == DTString {
		for _, s := range t.Strings {
			b = appendBytesField(b, 8, s)
		}
		return b
	}
	if len(t.Data) > 0 {
		b = appendBytesField(b, 4, t.Data)
	}
	return b
}

// -- Predict ---------------------------------------------------------------------------

// PredictCall is a PredictRequest {1: model_spec, 2: inputs, 3: output_filter}, its
// tensors still bytes until the signature says how large each may be.
type PredictCall struct {
	Spec         ModelSpec
	Tensors      map[string][]byte
	OutputFilter []string
}

func decodePredict(buf []byte) (*PredictCall, error) {
	call := &PredictCall{Tensors: map[string][]byte{}}
	spec, err := eachRequestField(buf, 3, func(num protowire.Number, b []byte) error {
		switch num {
		case 2:
			k, v, err := mapEntry(b)
			if err != nil {
				return err
			}
			call.Tensors[k] = v
		case 3:
			call.OutputFilter = append(call.OutputFilter, string(b))
		}
		return nil
	})
	call.Spec = spec
	return call, err
}

// encodePredictResponse is {1: outputs, 2: model_spec}.
func encodePredictResponse(model string, version int64, signature string, outputs map[string]*Tensor) []byte {
	var b []byte
	for _, k := range sortedKeys(outputs) {
		entry := appendStringField(nil, 1, k)
		entry = appendBytesField(entry, 2, encodeTensor(outputs[k]))
		b = appendBytesField(b, 1, entry)
	}
	return appendBytesField(b, 2, encodeSpec(model, &version, signature))
}

// -- Classify and Regress --------------------------------------------------------------

// decodeExamples reads a Classification/RegressionRequest {1: model_spec, 2: Input}:
// each serialized tf.Example, with a context's bytes before each.
func decodeExamples(buf []byte, maxElements, maxBytes int) (ModelSpec, [][]byte, error) {
	var examples [][]byte
	made := 0
	spec, err := eachRequestField(buf, 2, func(num protowire.Number, b []byte) error {
		if num != 2 {
			return nil
		}
		return eachField(b, func(kind protowire.Number, t protowire.Type, _ uint64, listed []byte) error {
			if t != protowire.BytesType {
				return nil
			}
			var context []byte
			var found [][]byte
			if err := eachField(listed, func(inner protowire.Number, t2 protowire.Type, _ uint64, v []byte) error {
				if t2 != protowire.BytesType {
					return nil
				}
				if inner == 1 {
					found = append(found, v)
					if len(examples)+len(found) > maxElements {
						return invalid("Input holds over %d examples; this model server takes at most %d in one request", maxElements, maxElements)
					}
				} else if inner == 2 && kind == 2 {
					context = v
				}
				return nil
			}); err != nil {
				return err
			}
			for _, e := range found {
				made += len(context) + len(e)
			}
			if made > maxBytes {
				return invalid("the examples with their context make over %d bytes (the context is copied before each example); send fewer examples or a smaller context", maxBytes)
			}
			for _, e := range found {
				if len(context) > 0 {
					e = append(append([]byte(nil), context...), e...)
				}
				examples = append(examples, e)
			}
			return nil
		})
	})
	if err == nil && len(examples) == 0 {
		err = invalid("Input is empty")
	}
	return spec, examples, err
}

// float32At reads element i of a float tensor (float or double) as float32.
func floatAt(t *Tensor, i int) float64 {
	switch t.DType {
	case DTDouble:
		return math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:]))
	case DTFloat:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:])))
	}
	return numberAt(t, i)
}

func encodeClassifyResponse(model string, version int64, signature string, classes, scores *Tensor) []byte {
	shape := func() *Tensor {
		if classes != nil {
			return classes
		}
		return scores
	}()
	rows, cols := int(shape.Shape[0]), int(shape.Shape[1])
	var result []byte
	for i := 0; i < rows; i++ {
		var row []byte
		for j := 0; j < cols; j++ {
			var one []byte
			if classes != nil {
				one = appendStringField(one, 1, string(classes.Strings[i*cols+j]))
			}
			if scores != nil {
				one = protowire.AppendTag(one, 2, protowire.Fixed32Type)
				one = protowire.AppendFixed32(one, math.Float32bits(float32(floatAt(scores, i*cols+j))))
			}
			row = appendBytesField(row, 1, one)
		}
		result = appendBytesField(result, 1, row)
	}
	b := appendBytesField(nil, 1, result)
	return appendBytesField(b, 2, encodeSpec(model, &version, signature))
}

func encodeRegressResponse(model string, version int64, signature string, values *Tensor) ([]byte, error) {
	if len(values.Shape) == 0 || (len(values.Shape) > 1 && values.NumElements() != int(values.Shape[0])) {
		return nil, invalid("Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got %s", pyList(values.Shape))
	}
	var result []byte
	for i := 0; i < int(values.Shape[0]); i++ {
		one := protowire.AppendTag(nil, 1, protowire.Fixed32Type)
		one = protowire.AppendFixed32(one, math.Float32bits(float32(floatAt(values, i))))
		result = appendBytesField(result, 1, one)
	}
	b := appendBytesField(nil, 1, result)
	return appendBytesField(b, 2, encodeSpec(model, &version, signature)), nil
}

// -- metadata and status -----------------------------------------------------------------

func decodeMetadataRequest(buf []byte) (ModelSpec, []string, error) {
	var fields []string
	spec, err := eachRequestField(buf, 2, func(num protowire.Number, b []byte) error {
		if num == 2 {
			if len(fields) >= 1024 {
				return invalid("a metadata_field of more than 1024 names")
			}
			fields = append(fields, string(b))
		}
		return nil
	})
	return spec, fields, err
}

// decodeSpecOnly reads field 1 (model_spec) of a request.
func decodeSpecOnly(buf []byte) (ModelSpec, error) {
	var spec ModelSpec
	err := eachField(buf, func(num protowire.Number, typ protowire.Type, _ uint64, b []byte) error {
		if num != 1 {
			return nil
		}
		if err := wantMessage(num, typ); err != nil {
			return err
		}
		s, err := decodeSpec(b)
		spec = s
		return err
	})
	return spec, err
}

const signatureDefMap = "type.googleapis.com/tensorflow.serving.SignatureDefMap"

func encodeMetadataResponse(model string, version int64, signatures map[string][]byte) []byte {
	var sigMap []byte
	for _, k := range sortedKeys(signatures) {
		entry := appendStringField(nil, 1, k)
		entry = appendBytesField(entry, 2, signatures[k])
		sigMap = appendBytesField(sigMap, 1, entry)
	}
	anyValue := appendStringField(nil, 1, signatureDefMap)
	anyValue = appendBytesField(anyValue, 2, sigMap)
	entry := appendStringField(nil, 1, "signature_def")
	entry = appendBytesField(entry, 2, anyValue)
	b := appendBytesField(nil, 1, encodeSpec(model, &version, ""))
	return appendBytesField(b, 2, entry)
}

var stateNumbers = map[string]uint64{"START": 10, "LOADING": 20, "AVAILABLE": 30, "UNLOADING": 40, "END": 50}

func encodeStatusResponse(statuses []VersionStatus) []byte {
	sort.Slice(statuses, func(a, b int) bool { return statuses[a].Version > statuses[b].Version })
	var b []byte
	for _, v := range statuses {
		code := uint64(CodeUnknown)
		for c, name := range codeNames {
			if name == v.ErrorCode {
				code = uint64(c)
			}
		}
		status := appendVarintField(nil, 1, code)
		status = appendStringField(status, 2, v.ErrorMessage)
		one := appendVarintField(nil, 1, uint64(v.Version))
		one = appendVarintField(one, 2, stateNumbers[v.State])
		one = appendBytesField(one, 3, status)
		b = appendBytesField(b, 1, one)
	}
	return b
}

// -- the MetaGraphDef's signatures --------------------------------------------------------

// ParseMetaGraphSignatures reads MetaGraphDef {5: signature_def map<string, SignatureDef>}:
// each signature whose inputs and outputs are all dense tensors (the others are not
// served, as by TensorFlow Serving's Predict), and each one's bytes.
func ParseMetaGraphSignatures(meta []byte) (map[string]*Signature, map[string][]byte, error) {
	sigs := map[string]*Signature{}
	raw := map[string][]byte{}
	err := eachField(meta, func(num protowire.Number, typ protowire.Type, _ uint64, b []byte) error {
		if num != 5 || typ != protowire.BytesType {
			return nil
		}
		name, value, err := mapEntry(b)
		if err != nil {
			return err
		}
		sig, ok, err := parseSignatureDef(value)
		if err != nil {
			return err
		}
		if ok {
			sigs[name] = sig
			raw[name] = append([]byte(nil), value...)
		}
		return nil
	})
	return sigs, raw, err
}

func parseSignatureDef(buf []byte) (*Signature, bool, error) {
	sig := &Signature{Inputs: map[string]*TensorInfo{}, Outputs: map[string]*TensorInfo{}}
	dense := true
	err := eachField(buf, func(num protowire.Number, typ protowire.Type, _ uint64, b []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1, 2:
			key, value, err := mapEntry(b)
			if err != nil {
				return err
			}
			info, ok, err := parseTensorInfo(value)
			if err != nil {
				return err
			}
			if !ok {
				dense = false
				return nil
			}
			info.Key = key
			if num == 1 {
				sig.Inputs[key] = info
			} else {
				sig.Outputs[key] = info
			}
		case 3:
			sig.MethodName = string(b)
		}
		return nil
	})
	if err != nil || !dense || len(sig.Outputs) == 0 {
		return nil, false, err
	}
	if sig.MethodName == "" {
		sig.MethodName = "tensorflow/serving/predict"
	}
	sig.inputList, sig.outputList = sortedInfos(sig.Inputs), sortedInfos(sig.Outputs)
	return sig, true, nil
}

func parseTensorInfo(buf []byte) (*TensorInfo, bool, error) {
	info := &TensorInfo{KnownRank: true}
	dense := false
	err := eachField(buf, func(num protowire.Number, typ protowire.Type, v uint64, b []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			info.TensorName, dense = string(b), true
		case num == 2 && typ == protowire.VarintType:
			info.DType = DType(v)
		case num == 3 && typ == protowire.BytesType:
			return eachField(b, func(n protowire.Number, t protowire.Type, x uint64, d []byte) error {
				if n == 2 && t == protowire.BytesType {
					size, err := firstVarint(d)
					if err != nil {
						return err
					}
					info.Shape = append(info.Shape, int64(size))
				} else if n == 3 && t == protowire.VarintType && x != 0 {
					info.KnownRank = false
				}
				return nil
			})
		case num == 4 || num == 5:
			dense = false
		}
		return nil
	})
	return info, dense && info.DType != DTInvalid, err
}

// -- warm-up records ---------------------------------------------------------------------

// predictionLog reads a PredictionLog: its kind (6 predict, 2 classify, 3 regress) and
// its request's bytes; "" for a kind warm-up does not replay.
func predictionLog(buf []byte) (string, []byte) {
	kinds := map[protowire.Number]string{6: "predict", 2: "classify", 3: "regress"}
	kind, request := "", []byte(nil)
	_ = eachField(buf, func(num protowire.Number, typ protowire.Type, _ uint64, b []byte) error {
		if k, ok := kinds[num]; ok && typ == protowire.BytesType && kind == "" {
			kind = k
			_ = eachField(b, func(n protowire.Number, t protowire.Type, _ uint64, r []byte) error {
				if n == 1 && t == protowire.BytesType {
					request = r
				}
				return nil
			})
		}
		return nil
	})
	return kind, request
}

// tfRecords splits a TFRecord file: length (8), its CRC (4), data, its CRC (4). The CRCs
// are not checked; a truncated tail ends the file.
func tfRecords(data []byte) [][]byte {
	var out [][]byte
	for pos := 0; pos+12 <= len(data); {
		size := binary.LittleEndian.Uint64(data[pos:])
		start := pos + 12
		if size > uint64(len(data)) || start+int(size)+4 > len(data) {
			break
		}
		out = append(out, data[start:start+int(size)])
		pos = start + int(size) + 4
	}
	return out
}
