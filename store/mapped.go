package store

import (
	"fmt"
	"runtime/debug"
)

// withMapped calls fn with the file at path mapped read-only (mapFile),
// and unmaps it after. A mapped page that cannot be read (an I/O error,
// or the file cut short under the mapping) faults instead of failing a
// read: the fault is made this goroutine's panic while fn runs and
// returned as an error, as os.ReadFile's would have been, so that a merge
// fails and its run is kept rather than the process killed. fn must not
// keep data, nor anything slicing it, once it returns.
func withMapped(path string, fn func(data []byte) error) (err error) {
	data, release, err := mapFile(path)
	if err != nil {
		return err
	}
	defer release()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			fault, ok := r.(interface{ Addr() uintptr })
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("store: %s unreadable: mapped page at %#x faulted", path, fault.Addr())
		}
	}()
	return fn(data)
}
