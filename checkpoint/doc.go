// Package checkpoint reads and writes model weights as stored on disk:
// safetensors files (one file, or shards named by a *.safetensors.index.json),
// PyTorch zip checkpoints as torch.save writes them (.bin, .pth, .pt, .ckpt:
// a restricted pickle reader finds the tensors, which are then read in place
// like a safetensors file's; no code in them runs), and the diffusers
// pipeline folder that holds them (model_index.json, one folder per
// component with its config and weights).
//
// A File is validated completely when it is opened: every header field, every
// offset and every byte count is checked against the file's real size, so a
// File that opened can be read without further surprises (a file that shrinks
// afterwards gives read errors, not panics). Bad input gives a *FormatError
// naming the file and the fault.
//
// Weights are read two ways, which return the same bytes:
//
//   - pread (File.ReadAt, File.ReadRange, File.ReadRows): through the OS into
//     a caller's buffer, the path of the residency executor, which reuses its
//     staging buffers and never maps gigabytes it will not keep;
//   - mmap (File.Bytes): a zero-copy view of a read-only mapping of the whole
//     file, mapped on first use and unmapped by Close.
//
// DropCache tells the kernel a tensor's pages are no longer needed, so that a
// block the plan keeps on disk stops counting in RSS and the page cache.
//
// The Writer streams a safetensors file to disk tensor by tensor (a 28 GB
// synthetic checkpoint never sits in RAM) and publishes it atomically.
package checkpoint
