package media

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// writeAtomic writes path through a temporary file in the same directory
// (same filesystem, so the rename is atomic) that becomes path only after
// write, sync and close all succeed. On any error the temporary is removed.
func writeAtomic(path string, write func(f *os.File) error) (err error) {
	if info, statErr := os.Stat(path); statErr == nil && info.IsDir() {
		return fmt.Errorf("media: %s is a directory", path)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("media: create %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close() // the write error matters, not a second one
			os.Remove(tmp.Name())
		}
	}()
	if err = write(tmp); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil { // CreateTemp makes 0600
		return fmt.Errorf("media: write %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("media: write %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("media: write %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("media: write %s: %w", path, err)
	}
	return nil
}

// checkFolderTarget accepts a folder destination that does not exist or is
// an empty directory. A non-empty folder is refused: it may hold anything,
// and mixing new frames with old ones would be a partial result.
func checkFolderTarget(path string) error {
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("media: output folder: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("media: output folder %s exists and is not a directory", path)
	}
	empty, err := isEmptyDir(path)
	if err != nil {
		return fmt.Errorf("media: output folder: %w", err)
	}
	if !empty {
		return fmt.Errorf("media: output folder %s is not empty; refusing to overwrite it", path)
	}
	return nil
}

func isEmptyDir(path string) (bool, error) {
	d, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer d.Close()
	_, err = d.Readdirnames(1)
	if err == io.EOF {
		return true, nil
	}
	return false, err
}

// writeDirAtomic fills a temporary folder next to path and renames it to
// path when write succeeds; on any error the temporary folder is removed.
// path must be absent or an empty directory (which is replaced).
func writeDirAtomic(path string, write func(dir string) error) (err error) {
	path = filepath.Clean(path)
	if err := checkFolderTarget(path); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("media: create folder %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err = write(tmp); err != nil {
		return err
	}
	if err = os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes 0700
		return fmt.Errorf("media: create folder %s: %w", path, err)
	}
	// An empty target directory is replaced; checkFolderTarget ran first.
	if rmErr := os.Remove(path); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		return fmt.Errorf("media: replace folder %s: %w", path, rmErr)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("media: create folder %s: %w", path, err)
	}
	return nil
}
