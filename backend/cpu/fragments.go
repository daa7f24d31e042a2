package cpu

import (
	"bytes"
	"os"
	"strconv"
)

// fragmentOrders is how many of /proc/buddyinfo's orders are smaller than
// a huge page: orders 0-8 (4 KiB to 1 MiB) under 2 MiB huge pages on
// 4 KiB base pages.
const fragmentOrders = 9

// FragmentedFree is the kernel's free memory in blocks smaller than a huge
// page (/proc/buddyinfo, every zone), in bytes; 0 where unknown. No huge
// page can come from it, and the kernel hands it out first to 4 KiB
// requests, smallest blocks first. On a VM whose balloon reports free
// memory to its host, only whole huge-page blocks are reported, so these
// fragments are the free memory the host still backs: a 4 KiB page from
// them cost 1.3 µs to touch on the reference VM, a huge page 9 µs per
// 4 KiB (see Device.SmallPagesFirst).
func FragmentedFree() int64 {
	data, err := os.ReadFile("/proc/buddyinfo")
	if err != nil {
		return 0
	}
	return parseBuddyInfo(data)
}

// parseBuddyInfo sums the free blocks of the orders below a huge page over
// every zone line ("Node 0, zone   Normal   2022   2265 ..."). Lines it
// cannot read count nothing.
func parseBuddyInfo(data []byte) int64 {
	var total int64
	for _, line := range bytes.Split(data, []byte("\n")) {
		f := bytes.Fields(line)
		zone := -1
		for i, w := range f {
			if string(w) == "zone" {
				zone = i
				break
			}
		}
		if zone < 0 || len(f) < zone+3 {
			continue
		}
		var sum int64
		ok := true
		for order, w := range f[zone+2:] {
			if order >= fragmentOrders {
				break
			}
			n, err := strconv.ParseInt(string(w), 10, 64)
			if err != nil || n < 0 || n > 1<<40 {
				ok = false
				break
			}
			sum += n * (4096 << order)
		}
		if ok {
			total += sum
		}
	}
	return total
}
