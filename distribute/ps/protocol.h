// The method names and header fields of the parameter-server job's RPCs, shared by the
// servers (parameter servers, workers) and their clients (the strategy, the coordinator).
#pragma once

namespace strata::distribute::ps {

// Every request's header says who sent it; servers take requests from the chief as its
// heartbeat (ServerOptions::chief_timeout_seconds).
inline constexpr const char* kFrom = "from";
inline constexpr const char* kFromChief = "chief";
inline constexpr const char* kFromWorker = "worker";

// Both kinds of server.
inline constexpr const char* kPing = "ping";          // -> {incarnation}
inline constexpr const char* kShutdown = "shutdown";  // the job is over: join() returns

// Parameter servers.
inline constexpr const char* kCreate = "create";  // {items: [{key, mode}]} + one tensor per item
inline constexpr const char* kCreateOverwrite = "overwrite";  // the chief initialises
inline constexpr const char* kCreateIfAbsent = "if_absent";   // slots: the first creator wins
inline constexpr const char* kRead = "read";      // {keys} -> one tensor per key
inline constexpr const char* kUpdate = "update";  // {items: [{key, op}]} + one tensor per item
inline constexpr const char* kOpAssign = "assign";
inline constexpr const char* kOpAdd = "add";
inline constexpr const char* kOpSub = "sub";
inline constexpr const char* kPutPlacement = "put_placement";  // {key, placement}
inline constexpr const char* kGetPlacement = "get_placement";  // {key} -> {found, placement}

// Workers.
inline constexpr const char* kRun = "run";  // {closure, function, args} + tensors -> result or error

}  // namespace strata::distribute::ps
