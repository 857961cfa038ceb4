package scheduler_test

import (
	"fmt"
	"time"

	"github.com/baton-dev/baton/scheduler"
)

func Example() {
	s := scheduler.New(scheduler.Config{}) // no Wake: woken procedures are re-queued at the front
	users := scheduler.QueueKey{Kind: scheduler.KindTable, Name: "default:users"}
	orders := scheduler.QueueKey{Kind: scheduler.KindTable, Name: "default:orders"}

	// Two procedures on one table, one on another, and a server crash.
	s.AddBack(1, users)
	s.AddBack(2, users)
	s.AddBack(3, orders)
	s.AddBack(4, scheduler.QueueKey{Kind: scheduler.KindServer, Name: "rs1"})

	// Server work first, then the tables in turn.
	for i := range 4 {
		id, _ := s.Poll(time.Second)
		if i > 0 {
			fmt.Print(" ")
		}
		fmt.Print(id)
	}
	fmt.Println()

	// 1 alters the table; 2 wants to move one of its regions and must wait.
	fmt.Println(s.Acquire(1, users, nil, scheduler.TableLocks("default", "users", scheduler.Exclusive)))
	fmt.Println(s.Acquire(2, users, nil, scheduler.RegionLocks("default", "users", "r7")))
	fmt.Println(s.Why(2))

	// Releasing 1 puts 2 back in the queue; now it gets its locks.
	s.Release(1)
	id, _ := s.Poll(time.Second)
	fmt.Println(id, s.Acquire(id, users, nil, scheduler.RegionLocks("default", "users", "r7")))
	// Output:
	// 4 1 3 2
	// true
	// false
	// proc 2: waiting for lock table default:users (shared), held exclusive by 1
	// 2 true
}
