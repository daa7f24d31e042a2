package umt5

import "math"

// relativeBucket maps a relative position (key index - query index) to its
// bucket, bidirectionally, exactly as transformers' _relative_position_bucket
// does for an encoder: half the buckets for keys after the query, half for
// keys before; in each half, distances below maxExact get a bucket each and
// longer ones share logarithmically wider buckets up to maxDistance.
//
// The logarithmic part is evaluated in float32 step by step, as PyTorch
// does on a float32 tensor, then truncated toward zero: the distances whose
// ratio is an exact power (16, 32, 64 with 32 buckets and distance 128) land
// on an integer only if every step rounds the same way.
func relativeBucket(rel, numBuckets, maxDistance int) int32 {
	half := numBuckets / 2
	bucket := 0
	if rel > 0 {
		bucket = half
	}
	n := rel
	if n < 0 {
		n = -n
	}
	maxExact := half / 2
	if n < maxExact {
		return int32(bucket + n)
	}
	// torch.log(n.float() / max_exact): a float32 division, then a float32
	// log (correctly rounded here; Go's float64 log rounded once is too).
	ratio := float32(n) / float32(maxExact)
	lg := float32(math.Log(float64(ratio)))
	// / math.log(max_distance / max_exact): a Python float, rounded to
	// float32 when it meets the float32 tensor.
	lg = lg / float32(math.Log(float64(maxDistance)/float64(maxExact)))
	// * (num_buckets - max_exact), then .to(torch.long) truncates.
	lg = lg * float32(half-maxExact)
	large := min(maxExact+int(lg), half-1)
	return int32(bucket + large)
}

// bucketIDs returns the [seqLen, seqLen] bucket of every (query, key) pair,
// row-major: the ids to gather from a relative_attention_bias table. The
// bucket depends only on key - query, so each of the 2·seqLen-1 distances
// is bucketed once.
func bucketIDs(seqLen, numBuckets, maxDistance int) []int32 {
	byRel := make([]int32, 2*seqLen-1) // index rel + seqLen - 1
	for i := range byRel {
		byRel[i] = relativeBucket(i-(seqLen-1), numBuckets, maxDistance)
	}
	ids := make([]int32, seqLen*seqLen)
	for q := range seqLen {
		copy(ids[q*seqLen:(q+1)*seqLen], byRel[seqLen-1-q:])
	}
	return ids
}
