//go:build amd64

package gemm

// cpuid executes CPUID with EAX = leaf and ECX = sub.
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// l1DataBytes is the L1 data cache of one core as CPUID describes it, 0
// where it does not say: Intel's deterministic cache leaf (4), AMD's (and
// Hygon's) L1 leaf (0x80000005, size in KiB). Hypervisors pass both through.
// A hybrid Intel CPU's cores differ (48 KiB P-cores, 32 KiB E-cores) and
// CPUID describes the core the process started on: 0 there, so that the
// K block, and with it the last bits of every product, do not change from
// run to run.
func l1DataBytes() int {
	maxLeaf, b, c, d := cpuid(0, 0)
	vendor := string(le32(b)) + string(le32(d)) + string(le32(c))
	switch vendor {
	case "GenuineIntel":
		if maxLeaf < 4 {
			return 0
		}
		if maxLeaf >= 7 {
			if _, _, _, edx := cpuid(7, 0); edx&(1<<15) != 0 { // Hybrid
				return 0
			}
		}
		for sub := uint32(0); sub < 16; sub++ {
			a, b, c, _ := cpuid(4, sub)
			kind, level := a&0x1f, (a>>5)&7
			if kind == 0 {
				break // no more caches
			}
			if kind == 1 && level == 1 { // data cache, level 1
				ways, parts, line := int(b>>22)+1, int(b>>12&0x3ff)+1, int(b&0xfff)+1
				return ways * parts * line * (int(c) + 1)
			}
		}
	case "AuthenticAMD", "HygonGenuine":
		if maxExt, _, _, _ := cpuid(0x80000000, 0); maxExt >= 0x80000005 {
			_, _, c, _ := cpuid(0x80000005, 0)
			return int(c>>24) << 10
		}
	}
	return 0
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }
