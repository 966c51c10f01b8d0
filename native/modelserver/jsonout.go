package main

// The REST door's answers, written straight from the tensors' bytes.

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// numberAt is element i of a numeric tensor as float64 (exact for whole numbers < 2^53).
func numberAt(t *Tensor, i int) float64 {
	switch t.DType {
	case DTFloat:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*i:])))
	case DTDouble:
		return math.Float64frombits(binary.LittleEndian.Uint64(t.Data[8*i:]))
	case DTInt8:
		return float64(int8(t.Data[i]))
	case DTUint8, DTBool:
		return float64(t.Data[i])
	case DTInt16:
		return float64(int16(binary.LittleEndian.Uint16(t.Data[2*i:])))
	case DTUint16:
		return float64(binary.LittleEndian.Uint16(t.Data[2*i:]))
	case DTInt32:
		return float64(int32(binary.LittleEndian.Uint32(t.Data[4*i:])))
	case DTUint32:
		return float64(binary.LittleEndian.Uint32(t.Data[4*i:]))
	case DTInt64:
		return float64(int64(binary.LittleEndian.Uint64(t.Data[8*i:])))
	case DTUint64:
		return float64(binary.LittleEndian.Uint64(t.Data[8*i:]))
	}
	return math.NaN()
}

func appendFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e16 {
		b = strconv.AppendFloat(b, f, 'f', -1, bits)
		return append(b, ".0"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, bits)
}

func appendString(b []byte, s []byte) []byte {
	b = append(b, '"')
	for len(s) > 0 {
		c := s[0]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, `\u00`...)
				b = append(b, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
			default:
				b = append(b, c)
			}
			s = s[1:]
			continue
		}
		r, size := utf8.DecodeRune(s)
		b = utf8.AppendRune(b, r) // an invalid byte becomes U+FFFD
		s = s[size:]
	}
	return append(b, '"')
}

// appendElement writes element i.
func appendElement(b []byte, t *Tensor, i int, binaryOut bool) []byte {
	switch t.DType {
	case DTString:
		if binaryOut {
			b = append(b, `{"b64":"`...)
			b = base64.StdEncoding.AppendEncode(b, t.Strings[i])
			return append(b, `"}`...)
		}
		return appendString(b, t.Strings[i])
	case DTFloat:
		return appendFloat(b, numberAt(t, i), 32)
	case DTDouble:
		return appendFloat(b, numberAt(t, i), 64)
	case DTBool:
		if t.Data[i] != 0 {
			return append(b, "true"...)
		}
		return append(b, "false"...)
	case DTInt64:
		return strconv.AppendInt(b, int64(binary.LittleEndian.Uint64(t.Data[8*i:])), 10)
	case DTUint64:
		return strconv.AppendUint(b, binary.LittleEndian.Uint64(t.Data[8*i:]), 10)
	}
	return strconv.AppendInt(b, int64(numberAt(t, i)), 10)
}

// appendNested writes elements [start, ...) of shape dims as nested lists.
func appendNested(b []byte, t *Tensor, start int, dims []int64, binaryOut bool) []byte {
	if len(dims) == 0 {
		return appendElement(b, t, start, binaryOut)
	}
	step := 1
	for _, d := range dims[1:] {
		step *= int(d)
	}
	b = append(b, '[')
	for i := 0; i < int(dims[0]); i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendNested(b, t, start+i*step, dims[1:], binaryOut)
	}
	return append(b, ']')
}

func appendTensor(b []byte, name string, t *Tensor) []byte {
	return appendNested(b, t, 0, t.Shape, t.DType == DTString && strings.HasSuffix(name, "_bytes"))
}

// answerPool keeps answers' buffers for later answers (ReleaseAnswer): a batch-64 answer
// is ~11 KB, otherwise grown from nothing by doubling for every request.
var answerPool sync.Pool

func answerBuffer() []byte {
	if b, ok := answerPool.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, 4096)
}

// ReleaseAnswer hands an answer's buffer back once it is written out (the writer keeps
// no reference to it); buffers over 1 MiB are left to the collector.
func ReleaseAnswer(b []byte) {
	if c := cap(b); c >= 4096 && c <= 1<<20 {
		answerPool.Put(&b)
	}
}

// PredictAnswer is `{"predictions": rows}` or `{"outputs": columns}`; a single output
// loses its name, as in TensorFlow Serving.
func PredictAnswer(outputs map[string]*Tensor, rowFormat bool) ([]byte, error) {
	names := sortedKeys(outputs)
	b := answerBuffer()
	if !rowFormat {
		b = append(b, `{"outputs":`...)
		if len(names) == 1 {
			b = appendTensor(b, names[0], outputs[names[0]])
		} else {
			b = append(b, '{')
			for i, k := range names {
				if i > 0 {
					b = append(b, ',')
				}
				b = appendString(b, []byte(k))
				b = append(b, ':')
				b = appendTensor(b, k, outputs[k])
			}
			b = append(b, '}')
		}
		return append(b, '}'), nil
	}
	rows := -2
	for _, k := range names {
		r := outputs[k].Rows()
		if r < 0 || (rows != -2 && r != rows) {
			return nil, invalid("the outputs do not share a 0-th (batch) dimension, so they cannot be answered as rows; send 'inputs' (the columnar format) instead")
		}
		rows = r
	}
	b = append(b, `{"predictions":`...)
	if len(names) == 1 {
		b = appendTensor(b, names[0], outputs[names[0]])
		return append(b, '}'), nil
	}
	b = append(b, '[')
	for i := 0; i < rows; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		for j, k := range names {
			if j > 0 {
				b = append(b, ',')
			}
			t := outputs[k]
			b = appendString(b, []byte(k))
			b = append(b, ':')
			step := t.rowSize()
			b = appendNested(b, t, i*step, t.Shape[1:], t.DType == DTString && strings.HasSuffix(k, "_bytes"))
		}
		b = append(b, '}')
	}
	return append(b, "]}"...), nil
}

// errorBody is TensorFlow Serving's `{"error": message}`.
func errorBody(message string) []byte {
	b := append([]byte(`{"error":`), appendString(nil, []byte(message))...)
	return append(b, '}')
}
