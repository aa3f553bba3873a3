package track

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"iter"
)

// TFRecord framing, as TensorFlow's record writer and TensorBoard's reader
// (tensorboard/compat/tensorflow_stub/pywrap_tensorflow.py) have it:
//
//	u64 LE  len(data)
//	u32 LE  masked CRC-32C of those 8 bytes
//	data
//	u32 LE  masked CRC-32C of data
//
// with mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// appendRecord appends data framed as one TFRecord to b.
func appendRecord(b, data []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(data)))
	b = binary.LittleEndian.AppendUint32(b, maskedCRC(b[len(b)-8:]))
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, maskedCRC(data))
}

// errTorn is a record cut short: the writer stopped mid-record (a crash), as
// TensorBoard's reader tolerates at the end of a file.
var errTorn = errors.New("tfrecord: torn record at the end of the file")

// readRecords yields the records of r in order. A record cut short at the
// end ends the sequence with errTorn; a checksum mismatch is an error.
func readRecords(r io.Reader) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		br := bufio.NewReader(r)
		var off int64
		for {
			var hdr [12]byte
			n, err := io.ReadFull(br, hdr[:])
			if err == io.EOF {
				return
			}
			if err != nil {
				yield(nil, fmt.Errorf("offset %d (%d header bytes): %w", off, n, errTorn))
				return
			}
			if maskedCRC(hdr[:8]) != binary.LittleEndian.Uint32(hdr[8:]) {
				yield(nil, fmt.Errorf("tfrecord: offset %d: length checksum mismatch", off))
				return
			}
			size := binary.LittleEndian.Uint64(hdr[:8])
			if size > 1<<30 {
				yield(nil, fmt.Errorf("tfrecord: offset %d: record of %d bytes", off, size))
				return
			}
			data := make([]byte, size+4)
			if _, err := io.ReadFull(br, data); err != nil {
				yield(nil, fmt.Errorf("offset %d: %w", off, errTorn))
				return
			}
			if maskedCRC(data[:size]) != binary.LittleEndian.Uint32(data[size:]) {
				yield(nil, fmt.Errorf("tfrecord: offset %d: data checksum mismatch", off))
				return
			}
			off += 12 + int64(size) + 4
			if !yield(data[:size], nil) {
				return
			}
		}
	}
}
