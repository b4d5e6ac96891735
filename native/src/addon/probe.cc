// Host capability probe: what each engine needs, and in words the first
// thing that keeps the krun engine from working here.
#include "probe.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "js_args.h"
#include "krun_api.h"
#include "native_error.h"

extern char **environ;

namespace krunbox {
namespace {

constexpr const char *kDefaultLibkrun = "libkrun.so.1";
constexpr const char *kLibkrunfw = "libkrunfw.so.5";
// KVM backends that emulate instead of using VMX/SVM: a guest kernel crawls
// and dies in early boot (kvm_pvm, measured on the build machines).
const std::set<std::string> kSoftwareKvmBackends = {"kvm_pvm"};

std::optional<std::string> ReadText(const std::string &path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// ---- KVM ----

struct KvmProbe {
  bool device_present = false;
  bool accessible = false;
  int access_error = 0;
  bool hardware_virt = false;
  std::vector<std::string> modules;
  std::optional<std::string> backend;
  bool software_backend = false;
  bool usable = false;
};

bool CpuHasVmxOrSvm() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 5, "flags") != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string word;
    while (words >> word) {
      if (word == "vmx" || word == "svm") return true;
    }
  }
  return false;
}

std::vector<std::string> KvmModules() {
  std::set<std::string> names;
  // Loadable modules are listed in /proc/modules; built-in ones (and loaded
  // ones) with parameters appear under /sys/module.
  if (auto modules = ReadText("/proc/modules")) {
    std::istringstream lines(*modules);
    std::string line;
    while (std::getline(lines, line)) {
      std::string name = line.substr(0, line.find(' '));
      if (name.compare(0, 3, "kvm") == 0) names.insert(name);
    }
  }
  if (DIR *dir = opendir("/sys/module")) {
    while (struct dirent *entry = readdir(dir)) {
      std::string name = entry->d_name;
      if (name.compare(0, 3, "kvm") == 0) names.insert(name);
    }
    closedir(dir);
  }
  return {names.begin(), names.end()};
}

KvmProbe ProbeKvm() {
  KvmProbe k;
  struct stat st;
  k.device_present = stat("/dev/kvm", &st) == 0 && S_ISCHR(st.st_mode);
  if (k.device_present) {
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    k.accessible = fd >= 0;
    k.access_error = fd >= 0 ? 0 : errno;
    if (fd >= 0) close(fd);
  }
#if defined(__x86_64__) || defined(__i386__)
  k.hardware_virt = CpuHasVmxOrSvm();
#else
  // No cpuinfo flag outside x86: a /dev/kvm there is backed by the CPU's
  // virtualization extensions.
  k.hardware_virt = k.device_present;
#endif
  k.modules = KvmModules();
  for (const std::string &name : k.modules) {
    if (kSoftwareKvmBackends.count(name) != 0) {
      k.backend = name;
      k.software_backend = true;
      break;
    }
    if (name.compare(0, 4, "kvm_") == 0 && !k.backend) k.backend = name;
  }
  if (!k.backend && k.device_present && std::find(k.modules.begin(), k.modules.end(), "kvm") != k.modules.end()) {
#if !defined(__x86_64__) && !defined(__i386__)
    k.backend = "kvm";
#endif
  }
  k.usable = k.accessible && k.hardware_virt && !k.software_backend;
  return k;
}

// ---- libkrun / libkrunfw ----

struct LibraryProbe {
  std::string path;
  bool loadable = false;
  std::optional<std::string> resolved_path;
  std::optional<std::string> version;
  std::optional<std::string> error;
};

// "…/libkrun.so.1.17.0" -> "1.17.0"; libkrun has no version call.
std::optional<std::string> VersionFromFileName(const std::string &real_path, const std::string &stem) {
  std::string base = real_path.substr(real_path.rfind('/') + 1);
  std::string prefix = stem + ".so.";
  if (base.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  std::string version = base.substr(prefix.size());
  if (version.empty() || version.find_first_not_of("0123456789.") != std::string::npos) return std::nullopt;
  return version;
}

std::optional<std::string> LoadedFile(void *handle) {
  struct link_map *map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) return std::nullopt;
  char real[PATH_MAX];
  if (realpath(map->l_name, real) == nullptr) return std::string(map->l_name);
  return std::string(real);
}

// dlopen()s the library into this process only to look at it, then closes it.
LibraryProbe ProbeLibrary(const std::string &path, const std::string &stem, const std::vector<const char *> &symbols) {
  LibraryProbe p;
  p.path = path;
  dlerror();
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char *why = dlerror();
    p.error = why != nullptr ? why : "dlopen failed";
    return p;
  }
  for (const char *symbol : symbols) {
    if (dlsym(handle, symbol) == nullptr) {
      p.error = path + " does not export " + symbol;
      dlclose(handle);
      return p;
    }
  }
  p.loadable = true;
  p.resolved_path = LoadedFile(handle);
  if (p.resolved_path) p.version = VersionFromFileName(*p.resolved_path, stem);
  dlclose(handle);
  return p;
}

// libkrun dlopen()s libkrunfw by its bare name, through the loader's search
// path only: a copy next to libkrun is not found. (This process's view; the
// library's own hostProbe() asks krun-shim, in the environment a VM gets.)
LibraryProbe ProbeLibkrunfw() { return ProbeLibrary(kLibkrunfw, "libkrunfw", {"krunfw_get_kernel"}); }

// Every symbol krun-shim calls: the one list in krun_api.h.
const std::vector<const char *> kShimSymbols = {SHIM_LIBKRUN_SYMBOLS};
constexpr const char *kMinimumLibkrun = "1.18.1";  // 1.18.0 stalls vsock (libkrun#772); lib/probe.ts

// ---- bubblewrap ----

std::optional<std::string> FindInPath(const std::string &name) {
  const char *path_env = getenv("PATH");
  std::string path = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  std::istringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    std::string candidate = dir + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

// Output of `<file> --version`, or nullopt after a 2 s timeout or failure.
std::optional<std::string> RunVersion(const std::string &file) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  char *argv[] = {const_cast<char *>(file.c_str()), const_cast<char *>("--version"), nullptr};
  pid_t pid;
  int rc = posix_spawn(&pid, file.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return std::nullopt;
  }
  std::string out;
  char buffer[256];
  struct pollfd pfd = {fds[0], POLLIN, 0};
  while (out.size() < 4096 && poll(&pfd, 1, 2000) > 0) {
    ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  kill(pid, SIGKILL);  // no-op if it already exited; bounds a hung child
  while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  return Trim(out);
}

// ---- cgroups ----

struct MountEntry {
  std::string mount_point;
  std::string fs_type;
  std::vector<std::string> super_options;
};

std::vector<MountEntry> CgroupMounts() {
  std::vector<MountEntry> mounts;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    fields >> id >> parent >> dev >> root >> mount_point;
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    MountEntry m;
    std::string source, options;
    tail >> m.fs_type >> source >> options;
    if (m.fs_type != "cgroup" && m.fs_type != "cgroup2") continue;
    m.mount_point = mount_point;
    std::istringstream opts(options);
    std::string opt;
    while (std::getline(opts, opt, ',')) m.super_options.push_back(opt);
    mounts.push_back(m);
  }
  return mounts;
}

struct ControllerProbe {
  std::string name;
  int version = 0;  // 0: not found
  std::string path;
  bool writable = false;
};

struct CgroupProbe {
  std::string mode;
  std::vector<ControllerProbe> controllers;
  bool writable = false;
};

CgroupProbe ProbeCgroups() {
  CgroupProbe c;
  std::vector<MountEntry> mounts = CgroupMounts();
  bool has_v1 = false;
  const MountEntry *v2 = nullptr;
  for (const MountEntry &m : mounts) {
    if (m.fs_type == "cgroup2") {
      if (v2 == nullptr) v2 = &m;
    } else {
      has_v1 = true;
    }
  }
  c.mode = has_v1 && v2 != nullptr ? "hybrid" : has_v1 ? "v1" : v2 != nullptr ? "v2" : "none";
  std::string v2_controllers = v2 != nullptr ? ReadText(v2->mount_point + "/cgroup.controllers").value_or("") : "";
  std::istringstream v2_list(v2_controllers);
  std::set<std::string> v2_names{std::istream_iterator<std::string>(v2_list), std::istream_iterator<std::string>()};

  c.writable = true;
  for (const char *name : {"memory", "pids", "cpu", "freezer"}) {
    ControllerProbe p;
    p.name = name;
    for (const MountEntry &m : mounts) {
      if (m.fs_type != "cgroup") continue;
      if (std::find(m.super_options.begin(), m.super_options.end(), name) != m.super_options.end()) {
        p.version = 1;
        p.path = m.mount_point;
        break;
      }
    }
    // cgroup2 has no freezer controller: every cgroup has cgroup.freeze.
    if (p.version == 0 && v2 != nullptr && (v2_names.count(name) != 0 || std::string(name) == "freezer")) {
      p.version = 2;
      p.path = v2->mount_point;
    }
    p.writable = p.version != 0 && access(p.path.c_str(), W_OK) == 0;
    c.writable = c.writable && p.writable;
    c.controllers.push_back(p);
  }
  return c;
}

// ---- user namespaces ----

struct UsernsProbe {
  bool unprivileged_allowed = true;
  std::optional<std::string> blocked_by;
};

UsernsProbe ProbeUserns() {
  UsernsProbe u;
  auto check = [&u](const char *path, bool blocks_when_zero) {
    auto text = ReadText(path);
    if (!text || !u.unprivileged_allowed) return;
    bool zero = Trim(*text) == "0";
    if (zero == blocks_when_zero) {
      u.unprivileged_allowed = false;
      u.blocked_by = std::string(path) + " = " + Trim(*text);
    }
  };
  check("/proc/sys/user/max_user_namespaces", true);
  check("/proc/sys/kernel/unprivileged_userns_clone", true);               // Debian's older kernels
  check("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", false);  // Ubuntu 23.10+
  return u;
}

// ---- assembling the answer ----

Napi::Value NullableString(Napi::Env env, const std::optional<std::string> &value) {
  return value ? Napi::String::New(env, *value) : env.Null();
}

std::optional<std::string> UnavailableReason(const KvmProbe &k, const LibraryProbe &krun, const LibraryProbe &fw) {
  if (k.software_backend) {
    std::string reason = "software KVM backend " + *k.backend;
    if (!k.hardware_virt) reason += " (no vmx/svm hardware virtualization in /proc/cpuinfo)";
    return reason;
  }
  if (!k.hardware_virt) return "no vmx/svm (hardware virtualization) in /proc/cpuinfo";
  if (!k.device_present) return "no /dev/kvm device";
  if (!k.accessible) return std::string("no access to /dev/kvm: ") + strerror(k.access_error);
  if (!krun.loadable) return krun.path + " not found: " + krun.error.value_or("");
  if (!fw.loadable) return fw.path + " does not load by name: " + fw.error.value_or("");
  return std::nullopt;
}

}  // namespace

Napi::Value Probe(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Napi::Object options = OptionsAt(info, 0, "probe: options");
  std::string libkrun_path = OptionalString(options, "libkrunPath", "probe: options").value_or(kDefaultLibkrun);
  if (libkrun_path.empty()) ThrowInvalid(env, "probe: options.libkrunPath must not be empty");
  std::optional<std::string> bwrap = OptionalString(options, "bubblewrapPath", "probe: options");
  if (bwrap && bwrap->empty()) ThrowInvalid(env, "probe: options.bubblewrapPath must not be empty");
  if (!bwrap) bwrap = FindInPath("bwrap");

  KvmProbe k = ProbeKvm();
  LibraryProbe krun = ProbeLibrary(libkrun_path, "libkrun", kShimSymbols);
  LibraryProbe fw = ProbeLibkrunfw();
  std::optional<std::string> bwrap_version;
  if (bwrap) {
    std::optional<std::string> out = RunVersion(*bwrap);  // "bubblewrap 0.8.0"
    if (out && !out->empty()) bwrap_version = out->substr(out->rfind(' ') + 1);
  }
  CgroupProbe cg = ProbeCgroups();
  UsernsProbe userns = ProbeUserns();
  struct utsname uts;
  uname(&uts);

  Napi::Object result = Napi::Object::New(env);
  result.Set("arch", Napi::String::New(env, uts.machine));

  Napi::Object kvm = Napi::Object::New(env);
  kvm.Set("devicePresent", Napi::Boolean::New(env, k.device_present));
  kvm.Set("accessible", Napi::Boolean::New(env, k.accessible));
  kvm.Set("hardwareVirt", Napi::Boolean::New(env, k.hardware_virt));
  kvm.Set("backend", NullableString(env, k.backend));
  kvm.Set("softwareBackend", Napi::Boolean::New(env, k.software_backend));
  Napi::Array modules = Napi::Array::New(env, k.modules.size());
  for (size_t i = 0; i < k.modules.size(); i++) modules.Set(static_cast<uint32_t>(i), k.modules[i]);
  kvm.Set("modules", modules);
  kvm.Set("usable", Napi::Boolean::New(env, k.usable));
  result.Set("kvm", kvm);

  Napi::Object libkrun = Napi::Object::New(env);
  libkrun.Set("loadable", Napi::Boolean::New(env, krun.loadable));
  libkrun.Set("path", Napi::String::New(env, krun.path));
  libkrun.Set("resolvedPath", NullableString(env, krun.resolved_path));
  libkrun.Set("version", NullableString(env, krun.version));
  libkrun.Set("error", NullableString(env, krun.error));
  libkrun.Set("missingSymbols", Napi::Array::New(env, 0));
  libkrun.Set("minimumVersion", Napi::String::New(env, kMinimumLibkrun));
  result.Set("libkrun", libkrun);

  Napi::Object libkrunfw = Napi::Object::New(env);
  libkrunfw.Set("loadable", Napi::Boolean::New(env, fw.loadable));
  libkrunfw.Set("path", Napi::String::New(env, fw.path));
  libkrunfw.Set("error", NullableString(env, fw.error));
  result.Set("libkrunfw", libkrunfw);

  Napi::Object bubblewrap = Napi::Object::New(env);
  bubblewrap.Set("path", NullableString(env, bwrap));
  bubblewrap.Set("version", NullableString(env, bwrap_version));
  result.Set("bubblewrap", bubblewrap);

  Napi::Object cgroup = Napi::Object::New(env);
  cgroup.Set("mode", Napi::String::New(env, cg.mode));
  cgroup.Set("writable", Napi::Boolean::New(env, cg.writable));
  Napi::Object controllers = Napi::Object::New(env);
  for (const ControllerProbe &p : cg.controllers) {
    if (p.version == 0) {
      controllers.Set(p.name, env.Null());
      continue;
    }
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("version", Napi::Number::New(env, p.version));
    entry.Set("path", Napi::String::New(env, p.path));
    entry.Set("writable", Napi::Boolean::New(env, p.writable));
    controllers.Set(p.name, entry);
  }
  cgroup.Set("controllers", controllers);
  result.Set("cgroup", cgroup);

  Napi::Object userns_object = Napi::Object::New(env);
  userns_object.Set("unprivilegedAllowed", Napi::Boolean::New(env, userns.unprivileged_allowed));
  userns_object.Set("blockedBy", NullableString(env, userns.blocked_by));
  result.Set("userns", userns_object);

  result.Set("krunUnavailableReason", NullableString(env, UnavailableReason(k, krun, fw)));
  return result;
}

}  // namespace krunbox
