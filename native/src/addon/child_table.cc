#include "child_table.h"

#include <cerrno>
#include <csignal>
#include <deque>
#include <mutex>
#include <unordered_map>

namespace krunbox::children {
namespace {

struct Entry {
  bool watched = false;
  bool exited = false;
};

// Never destroyed: waiter threads may still use it while the process exits.
struct Table {
  std::mutex mutex;
  std::unordered_map<pid_t, Entry> entries;
  std::deque<pid_t> exited_order;
};

Table &GetTable() {
  static Table *table = new Table();
  return *table;
}

}  // namespace

void Add(pid_t pid) {
  Table &t = GetTable();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.entries[pid] = Entry{};  // a reused pid starts over
}

WatchStart BeginWatch(pid_t pid) {
  Table &t = GetTable();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.entries.find(pid);
  if (it == t.entries.end() || it->second.exited) return WatchStart::kNotOurs;
  if (it->second.watched) return WatchStart::kAlreadyWatched;
  it->second.watched = true;
  return WatchStart::kStarted;
}

void MarkExited(pid_t pid) {
  Table &t = GetTable();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = t.entries.find(pid);
  if (it == t.entries.end()) return;
  it->second.exited = true;
  t.exited_order.push_back(pid);
  while (t.exited_order.size() > kRetainedExited) {
    pid_t old = t.exited_order.front();
    t.exited_order.pop_front();
    auto entry = t.entries.find(old);
    if (entry != t.entries.end() && entry->second.exited) t.entries.erase(entry);
  }
}

int Signal(pid_t pid, int sig, bool *delivered) {
  Table &t = GetTable();
  std::lock_guard<std::mutex> lock(t.mutex);
  *delivered = false;
  auto it = t.entries.find(pid);
  if (it != t.entries.end() && it->second.exited) return 0;
  if (::kill(pid, sig) == 0) {
    *delivered = true;
    return 0;
  }
  return errno == ESRCH ? 0 : errno;
}

}  // namespace krunbox::children
