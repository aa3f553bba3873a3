package track

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// The TensorBoard messages evolm writes, encoded field by field with
// protowire after their published .proto files (field numbers in the
// comments); proto3 default values are left out.
//
//	tensorboard/compat/proto/event.proto:
//	  Event        1 wall_time double, 2 step int64,
//	               oneof what { 3 file_version string, 5 summary Summary, 7 session_log SessionLog }
//	  SessionLog   1 status (START = 1)
//	tensorboard/compat/proto/summary.proto:
//	  Summary      1 repeated Value value
//	  Value        1 tag, 9 metadata SummaryMetadata, oneof { 2 simple_value float, 8 tensor TensorProto }
//	  SummaryMetadata 1 plugin_data PluginData{1 plugin_name, 2 content bytes}
//	tensorboard/compat/proto/tensor.proto, tensor_shape.proto, types.proto:
//	  TensorProto  1 dtype (DT_FLOAT = 1, DT_STRING = 7), 2 tensor_shape, 8 repeated bytes string_val
//	  TensorShapeProto 2 repeated Dim{1 size}
//	tensorboard/plugins/hparams/plugin_data.proto, api.proto:
//	  HParamsPluginData 1 version, oneof { 2 experiment, 3 session_start_info, 4 session_end_info }
//	  Experiment   4 repeated HParamInfo{1 name, 4 type}, 5 repeated MetricInfo{1 name MetricName{2 tag}}
//	  SessionStartInfo 1 map<string, google.protobuf.Value> hparams, 5 start_time_secs double
//	  SessionEndInfo   1 status (SUCCESS = 1, FAILURE = 2), 2 end_time_secs double
//	google/protobuf/struct.proto:
//	  Value        2 number_value double, 3 string_value, 4 bool_value

func pbMsg(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

func pbStr(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func pbVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func pbDouble(b []byte, num protowire.Number, v float64) []byte {
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

func pbFloat(b []byte, num protowire.Number, v float32) []byte {
	b = protowire.AppendTag(b, num, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, math.Float32bits(v))
}

// tbEvent is an Event's header: wall time (seconds) and step.
func tbEvent(wall float64, step int64) []byte {
	return pbVarint(pbDouble(nil, 1, wall), 2, uint64(step))
}

// tbFileVersion is the first event of every file.
func tbFileVersion(wall float64) []byte { return pbStr(tbEvent(wall, 0), 3, "brain.Event:2") }

// tbSessionStart is SessionLog{START} at step: readers drop what earlier
// sessions wrote at or after step.
func tbSessionStart(wall float64, step int64) []byte {
	return pbMsg(tbEvent(wall, step), 7, pbVarint(nil, 1, 1))
}

// tbSummary is an Event holding a Summary of values.
func tbSummary(wall float64, step int64, values ...[]byte) []byte {
	var s []byte
	for _, v := range values {
		s = pbMsg(s, 1, v)
	}
	return pbMsg(tbEvent(wall, step), 5, s)
}

// tbScalar is a Summary.Value{tag, simple_value}: what EventAccumulator's
// Scalars and the scalars dashboard read.
func tbScalar(tag string, v float32) []byte { return pbFloat(pbStr(nil, 1, tag), 2, v) }

func tbPlugin(name string, content []byte) []byte {
	pd := pbStr(nil, 1, name)
	if len(content) > 0 {
		pd = pbMsg(pd, 2, content)
	}
	return pbMsg(nil, 1, pd)
}

// tbText is a text-plugin value: a scalar DT_STRING tensor.
func tbText(tag, text string) []byte {
	t := pbVarint(nil, 1, 7)
	t = pbMsg(t, 2, nil)
	t = pbMsg(t, 8, []byte(text))
	v := pbMsg(pbStr(nil, 1, tag), 9, tbPlugin("text", nil))
	return pbMsg(v, 8, t)
}

// tbHParams is an hparams-plugin value: its data in the metadata, a null
// tensor (DT_FLOAT of shape [0]) as the value.
func tbHParams(tag string, data []byte) []byte {
	null := pbMsg(pbVarint(nil, 1, 1), 2, pbMsg(nil, 2, pbVarint(nil, 1, 0)))
	v := pbMsg(pbStr(nil, 1, tag), 9, tbPlugin("hparams", data))
	return pbMsg(v, 8, null)
}

// hparam types of HParamInfo.
const (
	hpString  = 1
	hpBool    = 2
	hpFloat64 = 3
)

// tbExperiment is the hparams experiment: each param's name and type, and
// the metrics.
func tbExperiment(params []Param, metrics []string) []byte {
	var exp []byte
	for _, p := range params {
		_, typ := tbValue(p)
		exp = pbMsg(exp, 4, pbVarint(pbStr(nil, 1, p.Key), 4, typ))
	}
	for _, m := range metrics {
		exp = pbMsg(exp, 5, pbMsg(nil, 1, pbStr(nil, 2, m)))
	}
	return pbMsg(nil, 2, exp)
}

// tbSessionStartInfo is the run's hparams values.
func tbSessionStartInfo(params []Param, start float64) []byte {
	var ssi []byte
	for _, p := range params {
		v, _ := tbValue(p)
		ssi = pbMsg(ssi, 1, pbMsg(pbStr(nil, 1, p.Key), 2, v))
	}
	ssi = pbDouble(ssi, 5, start)
	return pbMsg(nil, 3, ssi)
}

// tbSessionEndInfo is the run's end.
func tbSessionEndInfo(ok bool, end float64) []byte {
	status := uint64(2)
	if ok {
		status = 1
	}
	return pbMsg(nil, 4, pbDouble(pbVarint(nil, 1, status), 2, end))
}

// tbValue encodes a param as a google.protobuf.Value and its hparam type.
func tbValue(p Param) ([]byte, uint64) {
	switch v := p.Value.(type) {
	case bool:
		x := uint64(0)
		if v {
			x = 1
		}
		return pbVarint(nil, 4, x), hpBool
	case int:
		return pbDouble(nil, 2, float64(v)), hpFloat64
	case int64:
		return pbDouble(nil, 2, float64(v)), hpFloat64
	case float64:
		return pbDouble(nil, 2, v), hpFloat64
	}
	return pbStr(nil, 3, p.Text()), hpString
}

// tbRead is what the resume scan needs of an event: its step, and whether
// it holds a scalar or starts a session.
type tbRead struct {
	step    int64
	scalar  bool
	session bool // SessionLog START
}

// readTBEvent decodes an Event's step, and whether its summary holds a
// simple_value or it is a SessionLog START.
func readTBEvent(b []byte) (tbRead, error) {
	var out tbRead
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 2 && typ == protowire.VarintType:
			out.step = int64(x)
		case num == 5 && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, val []byte, _ uint64) error {
				if num != 1 || typ != protowire.BytesType {
					return nil
				}
				return eachField(val, func(num protowire.Number, typ protowire.Type, _ []byte, _ uint64) error {
					if num == 2 && typ == protowire.Fixed32Type {
						out.scalar = true
					}
					return nil
				})
			})
		case num == 7 && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
				if num == 1 && typ == protowire.VarintType && x == 1 {
					out.session = true
				}
				return nil
			})
		}
		return nil
	})
	return out, err
}

// eachField calls f with each field of the message b: its number, wire
// type, bytes (length-delimited) and value (varint and fixed).
func eachField(b []byte, f func(protowire.Number, protowire.Type, []byte, uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("protobuf: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var y uint32
			y, n = protowire.ConsumeFixed32(b)
			x = uint64(y)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("protobuf: field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
