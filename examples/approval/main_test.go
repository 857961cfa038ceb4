package main

import "os"

func Example() {
	if err := run(os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// raise-quota waits for approval; approving it
	// raise-quota: SUCCESS, applied
	// open-firewall: ROLLEDBACK, withdrawn (open-firewall: not approved within 200ms)
}
