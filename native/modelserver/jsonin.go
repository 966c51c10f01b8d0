package main

// The REST door's request reader: one pass over the body, numbers read straight into a
// tensor's bytes (no value tree), the shape found on the way and checked regular.

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

type jsonReader struct {
	b   []byte
	pos int
}

func parseError(format string, args ...any) *ServingError {
	return invalid("JSON Parse error: "+format, args...)
}

func (r *jsonReader) ws() {
	for r.pos < len(r.b) {
		switch r.b[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

func (r *jsonReader) peek() byte {
	r.ws()
	if r.pos >= len(r.b) {
		return 0
	}
	return r.b[r.pos]
}

func (r *jsonReader) expect(c byte) error {
	if r.peek() != c {
		return parseError("expected %q at offset %d", c, r.pos)
	}
	r.pos++
	return nil
}

// str reads a string (at its opening quote), unescaped.
func (r *jsonReader) str() ([]byte, error) {
	if err := r.expect('"'); err != nil {
		return nil, err
	}
	start := r.pos
	for r.pos < len(r.b) {
		c := r.b[r.pos]
		if c == '"' {
			r.pos++
			return r.b[start : r.pos-1], nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return nil, parseError("a control character in a string at offset %d", r.pos)
		}
		r.pos++
	}
	out := append([]byte(nil), r.b[start:r.pos]...)
	for r.pos < len(r.b) {
		c := r.b[r.pos]
		switch {
		case c == '"':
			r.pos++
			return out, nil
		case c < 0x20:
			return nil, parseError("a control character in a string at offset %d", r.pos)
		case c != '\\':
			out = append(out, c)
			r.pos++
			continue
		}
		if r.pos+1 >= len(r.b) {
			break
		}
		e := r.b[r.pos+1]
		r.pos += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			x, ok := r.hex4()
			if !ok {
				return nil, parseError("a bad \\u escape at offset %d", r.pos)
			}
			rn := rune(x)
			if utf16.IsSurrogate(rn) && r.pos+1 < len(r.b) && r.b[r.pos] == '\\' && r.b[r.pos+1] == 'u' {
				r.pos += 2
				y, ok := r.hex4()
				if !ok {
					return nil, parseError("a bad \\u escape at offset %d", r.pos)
				}
				rn = utf16.DecodeRune(rn, rune(y))
			}
			out = utf8.AppendRune(out, rn)
		default:
			return nil, parseError("a bad escape at offset %d", r.pos)
		}
	}
	return nil, parseError("an unterminated string")
}

func (r *jsonReader) hex4() (uint64, bool) {
	if r.pos+4 > len(r.b) {
		return 0, false
	}
	x, err := strconv.ParseUint(string(r.b[r.pos:r.pos+4]), 16, 32)
	r.pos += 4
	return x, err == nil
}

// literal reads a number or a bare word (true, false, null, NaN, Infinity, -Infinity).
func (r *jsonReader) literal() []byte {
	r.ws()
	start := r.pos
	for r.pos < len(r.b) {
		c := r.b[r.pos]
		if literalByte(c) {
			r.pos++
			continue
		}
		break
	}
	return r.b[start:r.pos]
}

// skip passes over one value, checking its syntax, and returns its bytes.
func (r *jsonReader) skip(depth int) ([]byte, error) {
	if depth > 512 {
		return nil, invalid("the request is nested too deeply")
	}
	c := r.peek()
	start := r.pos
	switch c {
	case '"':
		if _, err := r.str(); err != nil {
			return nil, err
		}
	case '[', '{':
		r.pos++
		closing := byte(']')
		if c == '{' {
			closing = '}'
		}
		if r.peek() == closing {
			r.pos++
			return r.b[start:r.pos], nil
		}
		for {
			if c == '{' {
				if _, err := r.str(); err != nil {
					return nil, err
				}
				if err := r.expect(':'); err != nil {
					return nil, err
				}
			}
			if _, err := r.skip(depth + 1); err != nil {
				return nil, err
			}
			next := r.peek()
			r.pos++
			if next == closing {
				break
			}
			if next != ',' {
				return nil, parseError("expected ',' or %q at offset %d", closing, r.pos-1)
			}
		}
	case 0:
		return nil, parseError("the document ended early")
	default:
		lit := r.literal()
		if len(lit) == 0 {
			return nil, parseError("an unexpected character at offset %d", r.pos)
		}
		if _, ok := parseLiteral(lit); !ok {
			return nil, parseError("an invalid value %q", clip(lit))
		}
	}
	return r.b[start:r.pos], nil
}

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

// scalar is one JSON value that is not an array.
type scalar struct {
	kind  byte // 'n' number, 'b' bool, 's' string, 'z' null
	num   []byte
	f     float64
	truth bool
	str   []byte
}

func parseLiteral(lit []byte) (scalar, bool) {
	switch string(lit) {
	case "true":
		return scalar{kind: 'b', truth: true}, true
	case "false":
		return scalar{kind: 'b'}, true
	case "null":
		return scalar{kind: 'z'}, true
	case "NaN":
		return scalar{kind: 'n', num: lit, f: math.NaN()}, true
	case "Infinity":
		return scalar{kind: 'n', num: lit, f: math.Inf(1)}, true
	case "-Infinity":
		return scalar{kind: 'n', num: lit, f: math.Inf(-1)}, true
	}
	if !validNumber(lit) {
		return scalar{}, false
	}
	return scalar{kind: 'n', num: lit, f: math.NaN()}, true // read by put, as its dtype
}

// number is a JSON number's value at the precision of `bits` (32 or 64).
func (s scalar) number(bits int) float64 {
	if s.num[len(s.num)-1] == 'N' || s.num[len(s.num)-1] == 'y' { // NaN, Infinity
		return s.f
	}
	f, _ := strconv.ParseFloat(unsafe.String(&s.num[0], len(s.num)), bits) // out of range: ±Inf
	return f
}

// validNumber checks JSON's number grammar.
func validNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(b)
}

// tensorReader reads one input's value (nested lists of scalars) into a tensor.
type tensorReader struct {
	name   string
	dtype  DType
	shape  []int64 // per depth; -1 until the first list at that depth closes
	leaf   int     // the depth of scalars (-1: none seen yet)
	out    []byte
	strs   [][]byte
	count  int
	budget *int // elements the request may still bring
	limit  int
}

func (t *tensorReader) fail(why string) *ServingError {
	return invalid("input '%s': expected %s values in a regular (not ragged) nested list (%s)", t.name, t.dtype, why)
}

func (t *tensorReader) value(r *jsonReader, depth int) error {
	if depth > 64 {
		return invalid("the request is nested too deeply")
	}
	c := r.peek()
	if c == '[' {
		if t.leaf >= 0 && depth >= t.leaf {
			return t.fail("ragged")
		}
		if depth == len(t.shape) {
			t.shape = append(t.shape, -1)
		}
		start := r.pos
		r.pos++
		n := int64(0)
		if r.peek() == ']' {
			r.pos++
		} else {
			// a row of float32 leaves (the usual tensor's last dimension): its plain
			// numbers read by fastFloat, the rest (and the first row) by value
			row := t.dtype == DTFloat && t.leaf == depth+1 && len(t.shape) == depth+1
			for {
				if !row || !t.fastFloat(r) {
					if err := t.value(r, depth+1); err != nil {
						return err
					}
				}
				n++
				next := r.peek()
				r.pos++
				if next == ']' {
					break
				}
				if next != ',' {
					return parseError("expected ',' or ']' at offset %d", r.pos-1)
				}
			}
		}
		if t.shape[depth] == -1 {
			t.shape[depth] = n
			if depth == 1 {
				t.reserve(r.pos-start, len(r.b)-r.pos)
			}
		} else if t.shape[depth] != n {
			return t.fail("ragged")
		}
		return nil
	}
	if t.leaf == -1 {
		t.leaf = depth
	}
	if depth != t.leaf || depth != len(t.shape) {
		return t.fail("ragged")
	}
	*t.budget--
	if *t.budget < 0 {
		return invalid("the request holds over %d values; this model server takes at most %d in one request (--max_request_elements, the signature's batch bound)", t.limit, t.limit)
	}
	t.count++
	var s scalar
	switch c {
	case '"':
		b, err := r.str()
		if err != nil {
			return err
		}
		s = scalar{kind: 's', str: b}
	case '{':
		b, err := t.b64(r)
		if err != nil {
			return err
		}
		s = scalar{kind: 's', str: b}
	default:
		if t.dtype == DTFloat || t.dtype == DTDouble {
			if f, n, ok := fastNumber(r.b[r.pos:], t.dtype == DTFloat); ok {
				r.pos += n
				if t.dtype == DTFloat {
					t.add32(math.Float32bits(float32(f)))
				} else {
					t.add64(math.Float64bits(f))
				}
				return nil
			}
		}
		lit := r.literal()
		var ok bool
		s, ok = parseLiteral(lit)
		if !ok {
			return parseError("an invalid value %q", clip(lit))
		}
	}
	return t.put(s)
}

// fastFloat reads a plain number as the next float32 leaf (true), or leaves r as it was
// (false: value reads it, or says what is wrong with it).
func (t *tensorReader) fastFloat(r *jsonReader) bool {
	if *t.budget <= 0 {
		return false
	}
	if c := r.peek(); c == '[' || c == '"' || c == '{' {
		return false
	}
	f, size, ok := fastNumber(r.b[r.pos:], true)
	if !ok {
		return false
	}
	*t.budget--
	t.count++
	r.pos += size
	t.add32(math.Float32bits(float32(f)))
	return true
}

// reserve makes room for the rows still to come, guessed from the first row's text
// (rowText bytes) and the text left: one allocation instead of doubling as they are read.
func (t *tensorReader) reserve(rowText, left int) {
	size := t.dtype.Size()
	if size == 0 || t.count == 0 || rowText <= 0 {
		return
	}
	rows := left/(rowText+1) + 1
	elements := min(rows*t.count, t.count+max(*t.budget, 0))
	if want := elements * size; want > cap(t.out) {
		out := make([]byte, len(t.out), want)
		copy(out, t.out)
		t.out = out
	}
}

// add32 and add64 append a little-endian number to the tensor's bytes (in place when
// there is room: only the length is stored).
func (t *tensorReader) add32(x uint32) {
	if n := len(t.out); n+4 <= cap(t.out) {
		t.out = t.out[:n+4]
		binary.LittleEndian.PutUint32(t.out[n:], x)
		return
	}
	t.out = binary.LittleEndian.AppendUint32(t.out, x)
}

func (t *tensorReader) add64(x uint64) {
	if n := len(t.out); n+8 <= cap(t.out) {
		t.out = t.out[:n+8]
		binary.LittleEndian.PutUint64(t.out[n:], x)
		return
	}
	t.out = binary.LittleEndian.AppendUint64(t.out, x)
}

var exactPowers = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
	1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

func literalByte(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '+' || c == '.'
}

// fastNumber reads a JSON number at the start of b in one pass when its value is exact
// in float64 arithmetic (at most 2^53 as digits, a power of ten up to 22: Clinger's fast
// path, the same result as strconv.ParseFloat); ok false sends it to the full reader.
//
// near32: the value goes to a float32, so up to 19 digits are taken (float64(m) and the
// power of ten each round once: the double is within 2^-52 of the exact value, which
// rounds to the same float32 unless it lies that close to a float32 rounding boundary;
// the float32 a client sent as its shortest double never does).
func fastNumber(b []byte, near32 bool) (float64, int, bool) {
	i, neg := 0, false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	var m uint64
	digits, exp := 0, 0
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if digits <= 11 && i+8 <= len(b) {
			if v, ok := eightDigits(b[i:]); ok {
				m, digits = addEight(m, v, digits)
				i += 8
				continue
			}
		}
		if digits < 19 {
			m = m*10 + uint64(b[i]-'0')
			if m != 0 {
				digits++
			}
		} else {
			return 0, 0, false
		}
		i++
	}
	if i == start || (b[start] == '0' && i-start > 1) {
		return 0, 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		frac := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if digits <= 11 && i+8 <= len(b) {
				if v, ok := eightDigits(b[i:]); ok {
					m, digits = addEight(m, v, digits)
					exp -= 8
					i += 8
					continue
				}
			}
			if digits >= 19 {
				return 0, 0, false
			}
			m = m*10 + uint64(b[i]-'0')
			if m != 0 {
				digits++
			}
			exp--
			i++
		}
		if i == frac {
			return 0, 0, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		sign := 1
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			if b[i] == '-' {
				sign = -1
			}
			i++
		}
		e, first := 0, i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' && e < 10000 {
			e = e*10 + int(b[i]-'0')
			i++
		}
		if i == first {
			return 0, 0, false
		}
		exp += sign * e
	}
	if i < len(b) && literalByte(b[i]) {
		return 0, 0, false
	}
	if (m > 1<<53 && !near32) || exp < -22 || exp > 22 {
		if m != 0 {
			return 0, 0, false
		}
		exp = 0
	}
	f := float64(m)
	if exp < 0 {
		f /= exactPowers[-exp]
	} else {
		f *= exactPowers[exp]
	}
	if neg {
		f = -f
	}
	return f, i, true
}

// eightDigits is the number b[0:8] spells when all eight bytes are ASCII digits (eight
// at once in one word: the digits' nibbles paired into 2-, 4- and 8-digit numbers).
func eightDigits(b []byte) (uint64, bool) {
	v := binary.LittleEndian.Uint64(b)
	if v&0xF0F0F0F0F0F0F0F0 != 0x3030303030303030 || (v+0x0606060606060606)&0xF0F0F0F0F0F0F0F0 != 0x3030303030303030 {
		return 0, false
	}
	v = (v & 0x0F0F0F0F0F0F0F0F) * 2561 >> 8
	v = (v & 0x00FF00FF00FF00FF) * 6553601 >> 16
	return (v & 0x0000FFFF0000FFFF) * 42949672960001 >> 32, true
}

// addEight appends eight digits (worth v) to the mantissa m of `digits` significant
// digits (at most 11, so m stays below 10^19), as eight turns of fastNumber's loop would.
func addEight(m, v uint64, digits int) (uint64, int) {
	if m != 0 {
		return m*100000000 + v, digits + 8
	}
	for digits < 8 && v >= tens[digits] {
		digits++
	}
	return v, digits
}

var tens = [...]uint64{1, 10, 100, 1000, 10000, 100000, 1000000, 10000000}

// b64 reads {"b64": "..."} (TensorFlow Serving's binary value).
func (t *tensorReader) b64(r *jsonReader) ([]byte, error) {
	r.pos++
	key, err := r.str()
	if err != nil {
		return nil, err
	}
	if string(key) != "b64" {
		return nil, invalid("an input value may not be an object here")
	}
	if err := r.expect(':'); err != nil {
		return nil, err
	}
	if r.peek() != '"' {
		return nil, invalid("an input value may not be an object here")
	}
	text, err := r.str()
	if err != nil {
		return nil, err
	}
	if err := r.expect('}'); err != nil {
		return nil, invalid("an input value may not be an object here")
	}
	out := make([]byte, base64.StdEncoding.DecodedLen(len(text)))
	n, err := base64.StdEncoding.Decode(out, text)
	if err != nil {
		return nil, invalid("a b64 value is not valid base64")
	}
	return out[:n], nil
}

func (t *tensorReader) put(s scalar) error {
	if t.dtype == DTString {
		if s.kind != 's' {
			return t.fail("not strings")
		}
		t.strs = append(t.strs, s.str)
		return nil
	}
	switch s.kind {
	case 's':
		return t.fail("not numbers")
	case 'z':
		return t.fail("null")
	case 'b':
		if t.dtype != DTBool {
			return t.fail("booleans")
		}
		if s.truth {
			t.out = append(t.out, 1)
		} else {
			t.out = append(t.out, 0)
		}
		return nil
	}
	switch t.dtype {
	case DTFloat:
		t.out = binary.LittleEndian.AppendUint32(t.out, math.Float32bits(float32(s.number(32))))
	case DTDouble:
		t.out = binary.LittleEndian.AppendUint64(t.out, math.Float64bits(s.number(64)))
	case DTBool:
		if s.number(64) != 0 {
			t.out = append(t.out, 1)
		} else {
			t.out = append(t.out, 0)
		}
	case DTInt8, DTInt16, DTInt32, DTInt64, DTUint8, DTUint16, DTUint32, DTUint64:
		var x uint64
		if v, err := strconv.ParseInt(unsafe.String(&s.num[0], len(s.num)), 10, 64); err == nil {
			x = uint64(v)
		} else if v, err := strconv.ParseUint(unsafe.String(&s.num[0], len(s.num)), 10, 64); err == nil {
			x = v
		} else if f := s.number(64); f == math.Trunc(f) && !math.IsInf(f, 0) && math.Abs(f) < 1<<63 {
			x = uint64(int64(f))
		} else {
			return t.fail("fractions")
		}
		switch t.dtype.Size() {
		case 1:
			t.out = append(t.out, byte(x))
		case 2:
			t.out = binary.LittleEndian.AppendUint16(t.out, uint16(x))
		case 4:
			t.out = binary.LittleEndian.AppendUint32(t.out, uint32(x))
		default:
			t.out = binary.LittleEndian.AppendUint64(t.out, x)
		}
	default:
		return invalid("input '%s': %s is not read from JSON by this model server", t.name, t.dtype)
	}
	return nil
}

// readTensor reads one input's JSON value as its dtype.
func readTensor(value []byte, info *TensorInfo, budget *int, limit int) (*Tensor, error) {
	r := &jsonReader{b: value}
	t, err := readTensorAt(r, info, budget, limit)
	if err != nil {
		return nil, err
	}
	if r.peek() != 0 {
		return nil, parseError("an unexpected %q at offset %d", r.b[r.pos], r.pos)
	}
	return t, nil
}

// readTensorAt reads one input's value as its dtype from where r stands, leaving r after it.
func readTensorAt(r *jsonReader, info *TensorInfo, budget *int, limit int) (*Tensor, error) {
	tr := &tensorReader{name: info.Key, dtype: info.DType, leaf: -1, budget: budget, limit: limit}
	if err := tr.value(r, 0); err != nil {
		return nil, err
	}
	if tr.leaf == -1 { // only empty lists: the shape is what the lists say
		for i, d := range tr.shape {
			if d < 0 {
				tr.shape[i] = 0
			}
		}
	}
	t := &Tensor{DType: info.DType, Shape: tr.shape, Data: tr.out, Strings: tr.strs}
	if t.Shape == nil {
		t.Shape = []int64{}
	}
	if info.DType == DTString && t.Strings == nil {
		t.Strings = [][]byte{}
	}
	return t, nil
}

// PredictBody is a :predict request read against the model's signatures.
type PredictBody struct {
	Signature string
	Inputs    map[string]*Tensor
	RowFormat bool
}

// span passes over one array, object or scalar matching brackets and strings only: the
// numbers inside are read (and checked) by readTensor later, so the body's values are
// scanned twice quickly instead of parsed twice.
func (r *jsonReader) span() ([]byte, error) {
	r.ws()
	start := r.pos
	if r.pos >= len(r.b) {
		return nil, parseError("the document ended early")
	}
	if c := r.b[r.pos]; c != '[' && c != '{' {
		return r.skip(0)
	}
	stack := make([]byte, 0, 16)
	for r.pos < len(r.b) {
		c := r.b[r.pos]
		switch c {
		case '[', '{':
			if len(stack) >= 512 {
				return nil, invalid("the request is nested too deeply")
			}
			stack = append(stack, c+2) // ']' is '[' + 2, '}' is '{' + 2
		case ']', '}':
			if len(stack) == 0 || stack[len(stack)-1] != c {
				return nil, parseError("an unexpected %q at offset %d", c, r.pos)
			}
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				r.pos++
				return r.b[start:r.pos], nil
			}
		case '"':
			if _, err := r.str(); err != nil {
				return nil, err
			}
			continue
		}
		r.pos++
	}
	return nil, parseError("the document ended early")
}

// object reads an object's members as raw values.
func (r *jsonReader) object() ([]string, [][]byte, error) {
	if err := r.expect('{'); err != nil {
		return nil, nil, err
	}
	var keys []string
	var values [][]byte
	if r.peek() == '}' {
		r.pos++
		return keys, values, nil
	}
	for {
		k, err := r.str()
		if err != nil {
			return nil, nil, err
		}
		if err := r.expect(':'); err != nil {
			return nil, nil, err
		}
		var v []byte
		if string(k) == "instances" || string(k) == "inputs" {
			v, err = r.span()
		} else {
			v, err = r.skip(0)
		}
		if err != nil {
			return nil, nil, err
		}
		keys, values = append(keys, string(k)), append(values, v)
		next := r.peek()
		r.pos++
		if next == '}' {
			return keys, values, nil
		}
		if next != ',' {
			return nil, nil, parseError("expected ',' or '}' at offset %d", r.pos-1)
		}
	}
}

// elements reads an array's elements as raw values.
func (r *jsonReader) elements() ([][]byte, error) {
	if err := r.expect('['); err != nil {
		return nil, err
	}
	var values [][]byte
	if r.peek() == ']' {
		r.pos++
		return values, nil
	}
	for {
		v, err := r.skip(0)
		if err != nil {
			return nil, err
		}
		values = append(values, v)
		next := r.peek()
		r.pos++
		if next == ']' {
			return values, nil
		}
		if next != ',' {
			return nil, parseError("expected ',' or ']' at offset %d", r.pos-1)
		}
	}
}

func isB64(value []byte) bool {
	r := &jsonReader{b: value}
	keys, _, err := r.object()
	return err == nil && len(keys) == 1 && keys[0] == "b64"
}

func checkInputNames(given map[string][]byte, sig *Signature, name string) error {
	var unknown, missing []string
	for _, k := range sortedKeys(given) {
		if _, ok := sig.Inputs[k]; !ok {
			unknown = append(unknown, k)
		}
	}
	for _, k := range sig.InputNames() {
		if _, ok := given[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(unknown) == 0 && len(missing) == 0 {
		return nil
	}
	var parts []string
	if len(unknown) > 0 {
		parts = append(parts, "unknown input(s) "+strings.Join(unknown, ", "))
	}
	if len(missing) > 0 {
		parts = append(parts, "missing input(s) "+strings.Join(missing, ", "))
	}
	return invalid("%s; signature '%s' takes %s", strings.Join(parts, "; "), name, strings.Join(sig.InputNames(), ", "))
}

func unknownSignature(name string, signatures map[string]*Signature) *ServingError {
	known := strings.Join(sortedKeys(signatures), ", ")
	if known == "" {
		known = "none"
	}
	return invalid("Serving signature name: '%s' not found in signature def (it has %s)", name, known)
}

// ParsePredict reads a :predict body: `instances` (rows) or `inputs` (columns), each
// input as its signature's dtype and shape, at most maxElements values in all and at
// most bounds[input] in one input.
func ParsePredict(body []byte, signatures map[string]*Signature, maxElements int, bounds func(*Signature) map[string]int) (*PredictBody, error) {
	if p, ok := fastPredict(body, signatures, maxElements, bounds); ok {
		return p, nil
	}
	return parsePredict(body, signatures, maxElements, bounds)
}

// requestBudget is the most values a request to sig may bring: max_request_elements, or
// less when every input is bounded (its shape, max_batch_size rows); counted as read.
func requestBudget(sig *Signature, maxElements int, bounds func(*Signature) map[string]int) int {
	each := bounds(sig)
	if len(each) == len(sig.Inputs) && len(each) > 0 {
		most := 0
		for _, b := range each {
			most += b
		}
		return min(maxElements, most)
	}
	return maxElements
}

// fastPredict reads the common body, `{"instances": [plain values]}` for a signature of
// one input (a "signature_name" before it, other members skipped), in one pass: the
// values go into the tensor as the object is scanned (parsePredict brackets `instances`
// first, then reads it). ok false: the body is of another form or something in it is
// wrong; parsePredict then reads it, giving the same tensor or the error it always gives.
func fastPredict(body []byte, signatures map[string]*Signature, maxElements int, bounds func(*Signature) map[string]int) (*PredictBody, bool) {
	r := &jsonReader{b: body}
	if r.expect('{') != nil {
		return nil, false
	}
	name, named := "serving_default", false
	var input *Tensor
	for {
		k, err := r.str()
		if err != nil || r.expect(':') != nil {
			return nil, false
		}
		switch string(k) {
		case "signature_name":
			if named || input != nil {
				return nil, false // read after the values, or twice: the general reader
			}
			named = true
			if r.peek() == '"' {
				s, err := r.str()
				if err != nil {
					return nil, false
				}
				if len(s) > 0 {
					name = string(s)
				}
			} else if lit := r.literal(); string(lit) != "null" {
				return nil, false
			}
		case "instances":
			if input != nil || r.peek() != '[' {
				return nil, false
			}
			sig, ok := signatures[name]
			if !ok || len(sig.inputList) != 1 {
				return nil, false
			}
			if first := r.pos + 1; first < len(r.b) {
				r.pos = first
				c := r.peek()
				r.pos = first - 1
				if c == '{' || c == ']' { // objects, or empty: the general reader
					return nil, false
				}
			}
			budget := requestBudget(sig, maxElements, bounds)
			if input, err = readTensorAt(r, sig.inputList[0], &budget, budget); err != nil {
				return nil, false
			}
		case "inputs":
			return nil, false
		default:
			if _, err := r.skip(0); err != nil {
				return nil, false
			}
		}
		next := r.peek()
		r.pos++
		if next == '}' {
			break
		}
		if next != ',' {
			return nil, false
		}
	}
	if input == nil || r.peek() != 0 {
		return nil, false
	}
	sig := signatures[name]
	info := sig.inputList[0]
	arrays := map[string]*Tensor{info.Key: input}
	if !info.Fits(input.Shape) || input.Rows() < 0 || checkBounds(arrays, bounds(sig)) != nil {
		return nil, false
	}
	return &PredictBody{Signature: name, Inputs: arrays, RowFormat: true}, true
}

// parsePredict is ParsePredict for any body: the members first, then each input's value.
func parsePredict(body []byte, signatures map[string]*Signature, maxElements int, bounds func(*Signature) map[string]int) (*PredictBody, error) {
	r := &jsonReader{b: body}
	if r.peek() != '{' {
		if _, err := r.skip(0); err != nil {
			return nil, err
		}
		return nil, invalid("the request body must be a JSON object")
	}
	keys, values, err := r.object()
	if err != nil {
		return nil, err
	}
	if r.peek() != 0 {
		return nil, parseError("text after the document at offset %d", r.pos)
	}
	var instances, inputs, sigName []byte
	for i, k := range keys {
		switch k {
		case "instances":
			instances = values[i]
		case "inputs":
			inputs = values[i]
		case "signature_name":
			sigName = values[i]
		}
	}
	name := "serving_default"
	if sigName != nil && string(sigName) != "null" {
		sr := &jsonReader{b: sigName}
		s, err := sr.str()
		if err != nil {
			return nil, invalid("'signature_name' must be a string")
		}
		if len(s) > 0 {
			name = string(s)
		}
	}
	sig, ok := signatures[name]
	if !ok {
		return nil, unknownSignature(name, signatures)
	}
	if instances != nil && inputs != nil {
		return nil, invalid("Not formatted correctly, expecting only one of 'inputs' or 'instances' keys")
	}
	if instances == nil && inputs == nil {
		return nil, invalid("Missing 'inputs' or 'instances' key")
	}
	budget := requestBudget(sig, maxElements, bounds)
	maxElements = budget
	arrays := map[string]*Tensor{}
	if instances != nil {
		arrays, err = readRows(instances, sig, name, &budget, maxElements)
	} else {
		arrays, err = readColumns(inputs, sig, name, &budget, maxElements)
	}
	if err != nil {
		return nil, err
	}
	for k, t := range arrays {
		info := sig.Inputs[k]
		if !info.Fits(t.Shape) {
			return nil, invalid("input '%s': expected shape %s, got %s", k, info.ShapeText(), shapeString(t.Shape))
		}
	}
	if instances != nil {
		first := -2
		for _, t := range arrays {
			if t.Rows() < 0 || (first != -2 && t.Rows() != first) {
				return nil, invalid("in 'instances' every input must have the same 0-th dimension; use 'inputs' (the columnar format) otherwise")
			}
			first = t.Rows()
		}
	}
	if err := checkBounds(arrays, bounds(sig)); err != nil {
		return nil, err
	}
	return &PredictBody{Signature: name, Inputs: arrays, RowFormat: instances != nil}, nil
}

func checkBounds(arrays map[string]*Tensor, bounds map[string]int) error {
	for _, k := range sortedKeys(arrays) {
		if bound, ok := bounds[k]; ok && arrays[k].NumElements() > bound {
			return invalid("input '%s' holds %d elements; the signature takes at most %d (max_batch_size rows of its shape)", k, arrays[k].NumElements(), bound)
		}
	}
	return nil
}

func readColumns(value []byte, sig *Signature, name string, budget *int, limit int) (map[string]*Tensor, error) {
	given := map[string][]byte{}
	if len(value) > 0 && value[0] == '{' && !isB64(value) {
		r := &jsonReader{b: value}
		keys, values, err := r.object()
		if err != nil {
			return nil, err
		}
		for i, k := range keys {
			given[k] = values[i]
		}
	} else {
		names := sig.InputNames()
		if len(names) != 1 {
			return nil, invalid("the signature has %d inputs (%s): give 'inputs' as an object of input name -> value", len(names), strings.Join(names, ", "))
		}
		given[names[0]] = value
	}
	if err := checkInputNames(given, sig, name); err != nil {
		return nil, err
	}
	out := map[string]*Tensor{}
	for k, v := range given {
		t, err := readTensor(v, sig.Inputs[k], budget, limit)
		if err != nil {
			return nil, err
		}
		out[k] = t
	}
	return out, nil
}

func readRows(value []byte, sig *Signature, name string, budget *int, limit int) (map[string]*Tensor, error) {
	if len(value) == 0 || value[0] != '[' {
		return nil, invalid("'instances' must be a non-empty list")
	}
	names := sig.InputNames()
	r := &jsonReader{b: value}
	if r.pos++; r.peek() == ']' {
		return nil, invalid("'instances' must be a non-empty list")
	}
	if r.peek() != '{' || isB64FirstElement(value) {
		// plain values: the rows of the one input, read in one pass
		if len(names) != 1 {
			return nil, invalid("the signature has %d inputs (%s): give each instance as an object of input name -> value", len(names), strings.Join(names, ", "))
		}
		t, err := readTensor(value, sig.Inputs[names[0]], budget, limit)
		if err != nil {
			if se, ok := err.(*ServingError); ok && strings.Contains(se.Message, "not strings") {
				return nil, invalid("'instances' mixes objects and plain values; use one form")
			}
			return nil, err
		}
		return map[string]*Tensor{names[0]: t}, nil
	}
	rows, err := (&jsonReader{b: value}).elements()
	if err != nil {
		return nil, err
	}
	var keys []string
	columns := map[string][][]byte{}
	for i, row := range rows {
		if len(row) == 0 || row[0] != '{' {
			return nil, invalid("'instances' mixes objects and plain values; use one form")
		}
		ks, vs, err := (&jsonReader{b: row}).object()
		if err != nil {
			return nil, err
		}
		if i == 0 {
			keys = append([]string(nil), ks...)
		}
		if len(ks) != len(keys) {
			return nil, invalid("every object in 'instances' must name the same inputs")
		}
		for j, k := range ks {
			if _, ok := columns[k]; !ok && i > 0 {
				return nil, invalid("every object in 'instances' must name the same inputs")
			}
			columns[k] = append(columns[k], vs[j])
		}
	}
	given := map[string][]byte{}
	for k := range columns {
		given[k] = nil
	}
	if err := checkInputNames(given, sig, name); err != nil {
		return nil, err
	}
	out := map[string]*Tensor{}
	for k, parts := range columns {
		if len(parts) != len(rows) {
			return nil, invalid("every object in 'instances' must name the same inputs")
		}
		info := sig.Inputs[k]
		var rowsOf []*Tensor
		for _, p := range parts {
			t, err := readTensor(p, info, budget, limit)
			if err != nil {
				return nil, err
			}
			if len(rowsOf) > 0 && shapeString(t.Shape) != shapeString(rowsOf[0].Shape) {
				return nil, invalid("input '%s': expected %s values in a regular (not ragged) nested list (ragged)", k, info.DType)
			}
			rowsOf = append(rowsOf, t)
		}
		out[k] = stack(rowsOf)
	}
	return out, nil
}

func isB64FirstElement(value []byte) bool {
	r := &jsonReader{b: value}
	if r.expect('[') != nil {
		return false
	}
	first, err := r.skip(0)
	return err == nil && isB64(first)
}

// stack puts tensors of one shape side by side along a new first dimension.
func stack(parts []*Tensor) *Tensor {
	out := &Tensor{DType: parts[0].DType, Shape: append([]int64{int64(len(parts))}, parts[0].Shape...)}
	for _, p := range parts {
		out.Data = append(out.Data, p.Data...)
		out.Strings = append(out.Strings, p.Strings...)
	}
	return out
}

var _ = fmt.Sprint
