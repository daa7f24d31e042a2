package residency

import (
	"fmt"
	"time"

	"ferry/tensor"
	"ferry/trace"
)

// copyWorker loads queued blocks one at a time, in queue order, while the
// compute goroutine runs: the copy track of the trace.
func (e *Executor) copyWorker() {
	defer close(e.done)
	for {
		e.mu.Lock()
		for len(e.queue) == 0 && !e.closed {
			e.cond.Wait()
		}
		if e.closed {
			e.mu.Unlock()
			return
		}
		b := e.queue[0]
		e.queue = e.queue[1:]
		e.loading = b
		pre, preHost := b.prealloc, b.preHost
		b.prealloc, b.preHost = nil, nil
		e.mu.Unlock()

		buf, err := e.load(b, pre, preHost)

		e.mu.Lock()
		e.loading = nil
		b.dev, b.loadErr = buf, err
		close(b.ready)
		e.cond.Broadcast()
		e.mu.Unlock()
	}
}

// load brings b's weights to where its component computes, converting each
// tensor to its compute dtype on the way (the upcast is the "copy" on the CPU
// backend), into pre (and the host copy into preHost) when enqueue took its
// memory already. Reads from disk go through a bounded staging buffer.
func (e *Executor) load(b *Block, pre, preHost *tensor.Buffer) (*tensor.Buffer, error) {
	cs := b.comp
	backend, dev := e.cfg.Backend, e.dev
	if cs.plan.Placement == Host {
		backend, dev = e.cfg.HostBackend, e.host
	}
	if b.devBytes == 0 {
		// Only row-gathered tables: nothing moves, nothing is allocated.
		return tensor.HostBuffer(nil), nil
	}
	t0, start := e.cfg.Trace.Now(), time.Now() // the stats need no recorder
	e.mu.Lock()
	phase := e.phase
	e.mu.Unlock()
	buf := pre
	if buf == nil {
		var err error
		if buf, err = dev.Alloc(b.devBytes, b.Name); err != nil {
			return nil, err
		}
	}
	fromHost := cs.plan.FromHostCopy()
	// The disk tier holds nothing between loads, the page cache included:
	// from a block's second load on, its pages are dropped once read, so
	// that every reload comes from the disk as planned. A first read (a
	// one-pass component such as the text encoder, resident weights, host
	// copies) leaves them to the kernel, which keeps them while memory
	// allows, so that the next run reads from memory.
	rereads := cs.plan.FromDisk() && b.loads > 0
	if fromHost && b.host == nil {
		if err := e.fillHostCopy(b, preHost); err != nil {
			buf.Free()
			return nil, err
		}
		preHost = nil
	}
	preHost.Free() // a copy another load made meanwhile
	var read int64
	for i := range b.params {
		p := &b.params[i]
		view, err := p.deviceView(buf)
		if err == nil {
			if fromHost {
				raw := b.host.Bytes()[p.rawOff : p.rawOff+p.info.Size]
				err = upload(backend, view, raw, p)
			} else {
				err = e.stream(backend, buf, cs.Source, p)
				read += p.info.Size
				if rereads {
					cs.Source.Drop(p.name)
				}
			}
		}
		if err == nil {
			err = scaleWeight(backend, view, p)
		}
		if err != nil {
			buf.Free()
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		p.view = view
	}
	dur := time.Since(start)
	e.cfg.Trace.Add(trace.Span{Kind: trace.Copy, Track: trace.TrackCopy, Name: b.Name, Start: t0, Dur: e.cfg.Trace.Now() - t0, Bytes: b.devBytes})
	e.mu.Lock()
	b.loads++
	e.stats.Loads++
	e.stats.BytesCopied += b.devBytes
	e.stats.BytesReadDisk += read
	e.stats.CopyTime += dur
	e.addPhase(phase, 0, dur, 1)
	e.mu.Unlock()
	return buf, nil
}

// fillHostCopy reads b's tensors from disk into host memory in their storage
// dtype (into pre when enqueue took it): the host tier.
func (e *Executor) fillHostCopy(b *Block, pre *tensor.Buffer) error {
	host := pre
	if host == nil {
		var err error
		if host, err = e.host.Alloc(b.rawBytes, b.Name+" (host copy)"); err != nil {
			return fmt.Errorf("host tier: %w", err)
		}
	}
	for _, p := range b.params {
		dst := host.Bytes()[p.rawOff : p.rawOff+p.info.Size]
		if err := b.comp.Source.Read(p.name, 0, dst); err != nil {
			host.Free()
			return fmt.Errorf("read %s: %w", p.name, err)
		}
	}
	e.mu.Lock()
	b.host = host
	e.stats.BytesReadDisk += b.rawBytes
	e.mu.Unlock()
	return nil
}

// deviceView is p's tensor in the block's device buffer, packed as
// p.layout says.
func (p *param) deviceView(buf *tensor.Buffer) (*tensor.Tensor, error) {
	if p.layout != "" {
		return tensor.PackedView(buf, p.devOff, p.devType, p.layout, p.info.Shape...)
	}
	return tensor.View(buf, p.devOff, p.devType, p.info.Shape...)
}

// scaleWeight applies a scaled checkpoint's per-tensor scale to p's
// loaded view (tensor.WeightScaler): recorded for the products on a GEMM
// weight kept as fp8, folded into the values otherwise (every other
// weight is float32 on the device, computeType).
func scaleWeight(backend tensor.Backend, view *tensor.Tensor, p *param) error {
	s := p.info.Scale
	if s == 0 || s == 1 {
		return nil
	}
	ws, ok := backend.(tensor.WeightScaler)
	if !ok {
		return fmt.Errorf("scale_weight %g: this backend does not apply the scales of a scaled fp8 checkpoint", s)
	}
	return ws.ScaleWeight(view, s)
}

// upload converts a whole tensor's stored bytes into its device view:
// packing it, for a packed GEMM weight.
func upload(backend tensor.Backend, view *tensor.Tensor, raw []byte, p *param) error {
	if p.layout != "" {
		return backend.(tensor.MatrixPacker).PackRows(view, raw, p.info.DType, 0)
	}
	return backend.Upload(view, raw, p.info.DType)
}

// stream reads one tensor from its source chunk by chunk through the staging
// buffer, converting each chunk into the destination.
func (e *Executor) stream(backend tensor.Backend, buf *tensor.Buffer, src Source, p *param) error {
	if e.staging == nil {
		s, err := e.host.Alloc(e.cfg.ChunkBytes, "read staging")
		if err != nil {
			return fmt.Errorf("staging buffer: %w", err)
		}
		e.staging = s
	}
	if p.layout != "" {
		return e.streamPacked(backend, buf, src, p)
	}
	inSize := int64(p.info.DType.Size())
	outSize := int64(p.devType.Size())
	chunk := e.cfg.ChunkBytes / inSize * inSize
	for off := int64(0); off < p.info.Size; off += chunk {
		n := min(chunk, p.info.Size-off)
		raw := e.staging.Bytes()[:n]
		if err := src.Read(p.name, off, raw); err != nil {
			return err
		}
		dst, err := tensor.View(buf, p.devOff+off/inSize*outSize, p.devType, int(n/inSize))
		if err != nil {
			return err
		}
		if err := backend.Upload(dst, raw, p.info.DType); err != nil {
			return err
		}
	}
	return nil
}

// streamPacked is stream for a packed GEMM weight: chunks of whole row
// groups, each packed into place as it arrives.
func (e *Executor) streamPacked(backend tensor.Backend, buf *tensor.Buffer, src Source, p *param) error {
	view, err := p.deviceView(buf)
	if err != nil {
		return err
	}
	rowBytes := int64(p.info.Shape[1]) * int64(p.info.DType.Size())
	per := max(1, e.cfg.ChunkBytes/(rowBytes*int64(p.group))) * int64(p.group) // rows per chunk
	packer := backend.(tensor.MatrixPacker)
	for r0 := int64(0); r0 < int64(p.info.Shape[0]); r0 += per {
		rows := min(per, int64(p.info.Shape[0])-r0)
		raw := e.staging.Bytes()[:rows*rowBytes]
		if err := src.Read(p.name, r0*rowBytes, raw); err != nil {
			return err
		}
		if err := packer.PackRows(view, raw, p.info.DType, int(r0)); err != nil {
			return err
		}
	}
	return nil
}
