package main

import "os"

func Example() {
	if err := run(os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// rollout 1: SUCCESS
	// rollout 2: ROLLEDBACK
	// web: rollout of v2 starts
	// web: rollout of v2 done
	// web: rollout of v3 starts
	// a3: upgrade to v3 failed
	// web: rollout of v3 rolled back
	// versions: web/a1=v2 web/a2=v2 web/a3=v2
}
