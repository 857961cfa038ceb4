package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-dev/baton/cluster/client"
	"github.com/baton-dev/baton/cluster/clustertest"
	"github.com/baton-dev/baton/cluster/console"
)

// "What is confirmed is what was shown" (doc.go): a cancel confirmed on
// the page of its dry run cancels the procedures that dry run listed, not
// one submitted after it that the operator never saw.
func TestCancelConfirmsWhatWasShown(t *testing.T) {
	c := clustertest.New(t, clustertest.Config{Masters: 1})
	c.WaitLeader()
	cl := c.Client()
	ctx := context.Background()
	shown, err := cl.Submit(ctx, "sleep", map[string]string{"steps": "3", "delay": "1h"}, "", "batch", 0)
	if err != nil {
		t.Fatal(err)
	}
	con, err := console.New(console.Config{AdminAddr: c.Master(0).AdminAddr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { con.Close() })
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)

	req, _ := http.NewRequest("GET", srv.URL+"/ui/procedures/cancel?owner=batch", nil)
	resp, body := fetch(t, req)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `data-id="`+strconv.FormatUint(shown, 10)+`"`) {
		t.Fatalf("the dry run: %d\n%s", resp.StatusCode, body)
	}
	// Submitted after the page was shown, before it is confirmed.
	unseen, err := cl.Submit(ctx, "sleep", map[string]string{"steps": "3", "delay": "1h"}, "", "batch", 0)
	if err != nil {
		t.Fatal(err)
	}
	// The page's confirmation form, as a browser posts it.
	form := confirmForm(t, body, url.Values{"confirm": {"yes"}})
	req, _ = http.NewRequest("POST", srv.URL+"/ui/procedures/cancel", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, body := fetch(t, req); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the confirmation: %d\n%s", resp.StatusCode, body)
	}
	p, err := cl.Get(ctx, unseen)
	if err != nil {
		t.Fatal(err)
	}
	if p.GetAbortRequested() || p.GetState() == client.StateRolledBack {
		t.Fatalf("procedure %d, submitted after the dry run was shown, was cancelled too", unseen)
	}
	if p, err := cl.Wait(ctx, shown); err != nil || p.GetState() != client.StateRolledBack {
		t.Fatalf("procedure %d, shown and confirmed: %v %v, want ROLLEDBACK", shown, p.GetState(), err)
	}

	// A confirmation that does not say what it was shown (a hand-made
	// form) cancels nothing: it shows the dry run again, to confirm there.
	hand := url.Values{"owner": {"batch"}, "type": {""}, "state": {""}, "older_than": {""}, "confirm": {"yes"}}
	req, _ = http.NewRequest("POST", srv.URL+"/ui/procedures/cancel", strings.NewReader(hand.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, body = fetch(t, req)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, `data-id="`+strconv.FormatUint(unseen, 10)+`"`) || !strings.Contains(body, `id="confirm-form"`) {
		t.Fatalf("a confirmation without the ids shown: %d\n%s", resp.StatusCode, body)
	}
	if p, err := cl.Get(ctx, unseen); err != nil || p.GetAbortRequested() {
		t.Fatalf("procedure %d was cancelled by a confirmation that did not list it: %v %v", unseen, p, err)
	}
}
