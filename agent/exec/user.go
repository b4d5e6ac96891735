package exec

// Running a command as another user of the sandbox: "name" (from the
// sandbox's /etc/passwd), "uid" or "uid:gid". The agent keeps CAP_SETUID and
// CAP_SETGID for this alone (boot/caps.go); commands never get them.

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"krunbox/agent/protocol"
)

type execUser struct {
	uid, gid uint32
	home     string // from passwd; "" for a numeric user without an entry
	name     string
}

// resolveUser turns a user spec into ids, or an OpError: a name the image
// does not know is S001, an id the sandbox does not map is S226.
func resolveUser(spec string) (*execUser, *protocol.OpError) {
	if spec == "" {
		return nil, nil
	}
	namePart, groupPart, hasGroup := strings.Cut(spec, ":")
	u := &execUser{}
	if id, err := strconv.ParseUint(namePart, 10, 32); err == nil {
		u.uid = uint32(id)
		u.gid = u.uid
		if e := lookupPasswd(func(f []string) bool { return f[2] == namePart }); e != nil {
			u.gid, u.home, u.name = e.gid, e.home, e.name
		}
	} else {
		e := lookupPasswd(func(f []string) bool { return f[0] == namePart })
		if e == nil {
			return nil, protocol.BadArgumentError(fmt.Sprintf("user %q:", spec), "no such user in the sandbox's /etc/passwd")
		}
		*u = *e
	}
	if hasGroup {
		id, err := strconv.ParseUint(groupPart, 10, 32)
		if err != nil {
			return nil, protocol.BadArgumentError(fmt.Sprintf("user %q:", spec), "the group must be a number (uid:gid)")
		}
		u.gid = uint32(id)
	}
	for _, m := range []struct {
		file string
		id   uint32
	}{{"/proc/self/uid_map", u.uid}, {"/proc/self/gid_map", u.gid}} {
		if !idMapped(m.file, m.id) {
			return nil, protocol.UserNotMappedError(spec, m.id, m.file)
		}
	}
	return u, nil
}

// lookupPasswd returns the first passwd entry whose fields match.
func lookupPasswd(match func(fields []string) bool) *execUser {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 7 || !match(fields) {
			continue
		}
		uid, err1 := strconv.ParseUint(fields[2], 10, 32)
		gid, err2 := strconv.ParseUint(fields[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &execUser{uid: uint32(uid), gid: uint32(gid), home: fields[5], name: fields[0]}
	}
	return nil
}

// idMapped tells whether an id of this namespace has a host id (a line of
// uid_map/gid_map is "inside outside count"). Outside any user namespace
// every id is mapped.
func idMapped(file string, id uint32) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		var inside, outside, count uint64
		if n, _ := fmt.Sscan(line, &inside, &outside, &count); n == 3 && uint64(id) >= inside && uint64(id) < inside+count {
			return true
		}
	}
	return false
}

// credential is what the fork needs to switch to u (nil: stay root). Without
// setgroups (a namespace where it is denied) root's groups stay, which hold
// nothing but root's own.
func (u *execUser) credential() *syscall.Credential {
	if u == nil || (u.uid == 0 && u.gid == 0) {
		return nil
	}
	return &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}, NoSetGroups: !setgroupsAllowed()}
}

func setgroupsAllowed() bool {
	b, err := os.ReadFile("/proc/self/setgroups")
	return err != nil || strings.TrimSpace(string(b)) != "deny"
}

// userEnv gives a command run as u the HOME, USER and LOGNAME of its passwd
// entry, unless the request set them.
func (u *execUser) userEnv(env map[string]string) {
	if u == nil || u.name == "" {
		return
	}
	for k, v := range map[string]string{"HOME": u.home, "USER": u.name, "LOGNAME": u.name} {
		if _, set := env[k]; !set && v != "" {
			env[k] = v
		}
	}
}
