package checkpoint

import "fmt"

// PageCached reports how many of the file's bytes sit in the OS page cache
// now, so a planner can price a read at memory speed rather than disk
// speed. Nothing is read and no page is faulted in.
func (f *File) PageCached() (int64, error) {
	n, err := pageCacheBytes(f.f, f.size)
	if err != nil {
		return 0, fmt.Errorf("page cache of %s: %w", f.path, err)
	}
	return n, nil
}

// PageCached sums File.PageCached over the set's files; total is their
// size in bytes.
func (s *Set) PageCached() (cached, total int64, err error) {
	for _, f := range s.files {
		n, err := f.PageCached()
		if err != nil {
			return 0, 0, err
		}
		cached += n
		total += f.size
	}
	return cached, total, nil
}
