package console_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
)

// TestTreeOfAFinishedRootListsItsChildren: once a fanout has finished, its
// children's records are gone; the procedure page's tree lists them from
// the summaries the root keeps (marked as such), on the leader and on a
// standby, instead of "… and 3 more" with nothing listed, and a child's
// own page says what it is.
func TestTreeOfAFinishedRootListsItsChildren(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{Masters: 3, HTTP: true})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root, err := cl.Submit(ctx, "fanout", map[string]string{"children": "3", "steps": "1", "delay": "1ms"}, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cl.Wait(ctx, root)
	if err != nil || p.GetState() != client.StateSuccess || len(p.GetChildren()) != 3 {
		t.Fatalf("fanout: %v %v", p, err)
	}
	li, _ := c.WaitLeader()
	for _, m := range []*clustertest.Master{c.Master(li), c.Master((li + 1) % 3)} {
		c.WaitForNil("the tree on "+m.ID, func() error {
			code, body := get(t, m, fmt.Sprintf("/ui/procedures/%d", root))
			if code != http.StatusOK {
				return fmt.Errorf("status %d", code)
			}
			for _, ch := range p.GetChildren() {
				if !strings.Contains(body, fmt.Sprintf(`<a href="/ui/procedures/%d">%d</a> sleep`, ch, ch)) {
					return fmt.Errorf("child %d not in the tree:\n%s", ch, body)
				}
			}
			if n := strings.Count(body, "summary-only"); n != 3 {
				return fmt.Errorf("%d children marked as summaries, want 3", n)
			}
			if strings.Contains(body, "more</li>") || strings.Contains(body, "unknown-children") {
				return fmt.Errorf("children left unlisted:\n%s", body)
			}
			return nil
		})
		code, body := get(t, m, fmt.Sprintf("/ui/procedures/%d", p.GetChildren()[0]))
		if code != http.StatusOK {
			t.Fatalf("a child's page on %s: %d\n%s", m.ID, code, body)
		}
		mustContain(t, "child page", body, `id="summary-only"`, "SUCCESS", fmt.Sprintf(`parent <a href="/ui/procedures/%d">`, root))
	}
}
