// Package durable writes files so that a power cut leaves either the old
// content or the new, never a mix: the sequence of fsyncs and renames the
// store's checker, the provisioning and the update slots all need.
package durable

import (
	"errors"
	"os"
	"path/filepath"
)

// WriteFile replaces name with data: a new file beside it, synced, renamed
// over it, then the directory synced so that the rename itself survives.
// The directory is created if missing.
func WriteFile(name string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after the rename, nothing to remove
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), name); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir makes the entries of dir durable (a file created, renamed or
// removed in it).
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
