package fsops

import (
	"bufio"
	"bytes"
	"io"
)

const (
	// binarySniff: a NUL byte in the first 8 KiB marks a file as binary (skipped by
	// grep and sed, as ripgrep does by default).
	binarySniff = 8 << 10
	// maxLineLen bounds the memory one line may take (the agent is PID 1: an endless
	// line must not exhaust the sandbox's memory). grep matches a longer line on its
	// first maxLineLen bytes; sed refuses the file.
	maxLineLen = 16 << 20
)

// lineReader yields the lines of a file, without their '\n' ('\r' is kept), with
// bounded memory.
type lineReader struct {
	br   *bufio.Reader
	long []byte
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// reset makes the reader read r, keeping its 64 KiB buffer (a tree walk reads thousands of files).
func (lr *lineReader) reset(r io.Reader) {
	lr.br.Reset(r)
	lr.long = lr.long[:0]
}

// looksBinary peeks at the start of the file for a NUL byte.
func (lr *lineReader) looksBinary() bool {
	head, _ := lr.br.Peek(binarySniff)
	return bytes.IndexByte(head, 0) >= 0
}

// next returns the next line, valid until the following call. newline says whether
// the line ended with '\n' (only the last line may not); clipped says the line was
// longer than maxLineLen and only its start is returned. At the end it returns io.EOF
// with an empty line; a last line without '\n' comes with err == nil first.
func (lr *lineReader) next() (line []byte, newline, clipped bool, err error) {
	chunk, err := lr.br.ReadSlice('\n')
	if err == nil {
		return chunk[:len(chunk)-1], true, false, nil
	}
	if err != bufio.ErrBufferFull {
		return lineOrEnd(chunk, false, err)
	}
	lr.long = append(lr.long[:0], chunk...)
	for {
		chunk, err = lr.br.ReadSlice('\n')
		if room := maxLineLen - len(lr.long); room > 0 {
			if len(chunk) <= room {
				lr.long = append(lr.long, chunk...)
			} else {
				lr.long = append(lr.long, chunk[:room]...)
				clipped = true
			}
		} else if len(chunk) > 0 {
			clipped = true
		}
		switch {
		case err == nil:
			if !clipped {
				lr.long = lr.long[:len(lr.long)-1]
			}
			return lr.long, true, clipped, nil
		case err != bufio.ErrBufferFull:
			return lineOrEnd(lr.long, clipped, err)
		}
	}
}

// lineOrEnd turns a read that stopped without '\n' into a final line or the end.
func lineOrEnd(line []byte, clipped bool, err error) ([]byte, bool, bool, error) {
	if err == io.EOF && len(line) > 0 {
		return line, false, clipped, nil
	}
	return line, false, clipped, err
}
