package gemm

// Packed layouts (the micro-kernels read nothing else):
//
//   - A block: rows [i0, i0+mc) of op(A), k range [p0, p0+kc), cut into
//     panels of mr rows. Panel q starts at q·mr·kc and holds kc steps of
//     rows(q) floats (the last panel may have fewer rows; it is not padded
//     because each row count has its own kernel).
//   - B block: columns [j0, j0+nc) of op(B), the same k range, cut into
//     panels of nr columns. Panel q starts at q·nr·kc and holds kc steps of
//     nr floats, zero-padded past the last column.
//
// A bf16 B operand would keep the same panel order with 2-byte elements;
// only packB and the kernels' B loads would change.

// packA packs op(A)[i0:i0+mc, p0:p0+kc] into dst.
func (kn *kernel) packA(dst, a []float32, lda int, transA bool, i0, mc, p0, kc int) {
	for q := 0; q*kn.mr < mc; q++ {
		rows := min(kn.mr, mc-q*kn.mr)
		off := q * kn.mr * kc
		panel := dst[off : off+rows*kc]
		r0 := i0 + q*kn.mr
		if transA {
			kn.packRowsContiguous(panel, a, lda, r0, rows, p0, kc)
		} else {
			kn.packRowsStrided(panel, a, lda, r0, rows, p0, kc)
		}
	}
}

// packRowsStrided packs rows r0..r0+rows of a row-major matrix (each row
// contiguous in k) k-major: panel[p·rows + r] = a[(r0+r)·lda + p0+p].
func (kn *kernel) packRowsStrided(panel, a []float32, lda, r0, rows, p0, kc int) {
	p := 0
	if w := kn.transposeWidth(); kn.transposesPanel(rows) {
		for ; p+w <= kc; p += w {
			src := a[r0*lda+p0+p : (r0+rows-1)*lda+p0+p+w]
			dst := panel[p*rows : (p+w)*rows]
			kn.transposeBlock(dst, rows, src, lda, rows, true)
		}
	}
	if p == kc {
		return
	}
	for r := range rows {
		row := a[(r0+r)*lda+p0+p : (r0+r)*lda+p0+kc]
		for i, v := range row {
			panel[(p+i)*rows+r] = v
		}
	}
}

// packRowsContiguous packs rows r0..r0+rows of a matrix stored transposed
// (the rows of one k step are contiguous): panel[p·rows + r] =
// a[(p0+p)·lda + r0+r].
//
// The rows of one step (14 with AVX-512, 6 with AVX2) are too few for a
// memmove call per step to pay off: with AVX-512 each step is one masked
// load and store, with AVX2 one 8-float load and store.
// (Convolutions pack their im2col tiles this way; for 96 output channels
// the calls took as long as the products.)
func (kn *kernel) packRowsContiguous(panel, a []float32, lda, r0, rows, p0, kc int) {
	if kc == 0 || rows == 0 {
		return
	}
	if kn.transpose && rows <= 16 {
		_ = panel[kc*rows-1]
		_ = a[(p0+kc-1)*lda+r0+rows-1]
		copyRows16(&panel[0], &a[p0*lda+r0], lda, rows, kc)
		return
	}
	if kn.copyRows8 && rows <= 8 {
		_ = panel[kc*rows-1]
		_ = a[(p0+kc-1)*lda+r0+rows-1]
		fast := 0
		if lda >= 8 && rows >= 4 {
			fast = kc - 1 // every step but the last has a later one
		}
		copyRows8(&panel[0], &a[p0*lda+r0], lda, rows, kc, fast)
		return
	}
	for p := range kc {
		s := (p0+p)*lda + r0
		copy(panel[p*rows:(p+1)*rows], a[s:s+rows])
	}
}

// packB packs panels [q0, q1) of op(B)[p0:p0+kc, j0:j0+nc] into dst (each
// panel kc·nr floats, panel q at q·kc·nr).
func (kn *kernel) packB(dst, b []float32, ldb int, transB bool, j0, nc, p0, kc, q0, q1 int) {
	nr := kn.nr
	for q := q0; q < q1; q++ {
		kn.packBPanel(dst[q*kc*nr:(q+1)*kc*nr], b, ldb, transB, j0+q*nr, min(nr, nc-q*nr), p0, kc)
	}
}

// packBPanel packs one panel: columns [jq, jq+cols) of op(B), k range
// [p0, p0+kc), into panel (kc·nr floats).
func (kn *kernel) packBPanel(panel, b []float32, ldb int, transB bool, jq, cols, p0, kc int) {
	if transB {
		kn.packColsStrided(panel, b, ldb, jq, cols, p0, kc)
	} else {
		kn.packColsContiguous(panel, b, ldb, jq, cols, p0, kc)
	}
}

// packColsContiguous packs columns of a row-major B (one k step's columns
// are contiguous): panel[p·nr + j] = b[(p0+p)·ldb + jq+j], zero past cols.
// A whole panel goes by vector loads and stores (copyPanel16/32): a
// memmove call per 16 floats was 7% of an AVX2 attention at D=64, where
// V is such a B.
func (kn *kernel) packColsContiguous(panel, b []float32, ldb, jq, cols, p0, kc int) {
	nr := kn.nr
	if cols == nr && kc > 0 && (kn.copyRows8 && nr == 16 || kn.transpose && nr == 32) {
		_ = panel[kc*nr-1]
		_ = b[(p0+kc-1)*ldb+jq+nr-1]
		if nr == 16 {
			copyPanel16(&panel[0], &b[p0*ldb+jq], ldb, kc)
		} else {
			copyPanel32(&panel[0], &b[p0*ldb+jq], ldb, kc)
		}
		return
	}
	for p := range kc {
		s := (p0+p)*ldb + jq
		dst := panel[p*nr : (p+1)*nr]
		copy(dst, b[s:s+cols])
		clear(dst[cols:])
	}
}

// packColsStrided packs columns of B stored transposed (Bᵀ row-major, as
// PyTorch stores Linear weights [out, in]): panel[p·nr + j] =
// b[(jq+j)·ldb + p0+p], zero past cols.
func (kn *kernel) packColsStrided(panel, b []float32, ldb, jq, cols, p0, kc int) {
	nr := kn.nr
	p := 0
	if w := kn.transposeWidth(); w > 0 && nr%w == 0 {
		for ; p+w <= kc; p += w {
			for g := 0; g < nr; g += w {
				n := min(w, cols-g)
				dst := panel[p*nr+g : (p+w-1)*nr+g+w]
				if n <= 0 {
					for i := range w {
						clear(dst[i*nr : i*nr+w])
					}
					continue
				}
				src := b[(jq+g)*ldb+p0+p : (jq+g+n-1)*ldb+p0+p+w]
				kn.transposeBlock(dst, nr, src, ldb, n, false)
			}
		}
	}
	if p == kc {
		return
	}
	for j := range cols {
		row := b[(jq+j)*ldb+p0+p : (jq+j)*ldb+p0+kc]
		for i, v := range row {
			panel[(p+i)*nr+j] = v
		}
	}
	for ; p < kc; p++ {
		clear(panel[p*nr+cols : (p+1)*nr])
	}
}

// transposeWidth is how many steps the kernel's packers transpose at a
// time: 16 with AVX-512 (transpose16), 8 with AVX2 (transpose8), 0 where
// they go one float at a time.
func (kn *kernel) transposeWidth() int {
	switch {
	case kn.transpose:
		return 16
	case kn.transpose8:
		return 8
	}
	return 0
}

// transposesPanel says transposeBlock can pack an A panel of rows rows:
// at most the width, and for transpose8 at least 4 (its unmasked stores
// spill into the next step's place, rows floats on).
func (kn *kernel) transposesPanel(rows int) bool {
	w := kn.transposeWidth()
	return w > 0 && rows <= w && (w == 16 || rows >= 4)
}

// transposeBlock writes the transpose of a rows×transposeWidth block of
// src into dst, rows beyond read as zero. packed says dst is an A panel
// packed rows apart, so that nothing may be written past the block's
// rows·width floats.
func (kn *kernel) transposeBlock(dst []float32, dstStride int, src []float32, srcStride, rows int, packed bool) {
	if kn.transpose {
		mask := uint32(0xffff)
		if packed {
			mask = 1<<rows - 1
		}
		transpose16(&dst[0], dstStride, &src[0], srcStride, rows, mask)
		return
	}
	maskLast := 0
	if packed {
		maskLast = 1
	}
	transpose8(&dst[0], dstStride, &src[0], srcStride, rows, maskLast)
}
