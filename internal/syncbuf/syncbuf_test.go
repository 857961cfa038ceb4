package syncbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Run under -race: writers and a reader at once, and every write lands.
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				fmt.Fprintf(&b, "w%d %d\n", w, i)
			}
		}()
	}
	for i := 0; i < 50; i++ {
		_ = b.String()
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 400 {
		t.Fatalf("%d lines written, want 400", n)
	}
}
