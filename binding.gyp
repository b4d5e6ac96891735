{
  # Three targets, built together by node-gyp, each from its own folder of native/src:
  #   krunbox         addon/   the N-API addon (build/Release/krunbox.node), loaded by lib/native.ts
  #   krun-shim       shim/    one process per microVM (build/Release/krun-shim), resolved next to the addon
  #   krunbox-reaper  reaper/  one process per sandbox that cleans up after it (build/Release/krunbox-reaper), beside it too
  #   krunbox-reset   reset/   one run per reset of a reused pool member (lib/pool-reset.ts), beside it too
  # common/ holds the reaper's file and cgroup steps, which the addon's fsBatch and writeFiles use too.
  # The libkrun test double is NOT built here (it must never ship): see scripts/build-native.sh.
  'targets': [
    {
      'target_name': 'krunbox',
      'sources': [
        'native/src/addon/addon.cc',
        'native/src/addon/child_table.cc',
        'native/src/addon/exit_watch.cc',
        'native/src/addon/fd_passing.cc',
        'native/src/addon/fs_batch.cc',
        'native/src/addon/idmap_helper.cc',
        'native/src/addon/js_args.cc',
        'native/src/addon/native_error.cc',
        'native/src/addon/probe.cc',
        'native/src/addon/process_signal.cc',
        'native/src/addon/signal_names.cc',
        'native/src/addon/spawn.cc',
        'native/src/addon/spawn_launch.cc',
        'native/src/addon/write_files.cc',
        # fsBatch's removeCgroup and removeTree are the reaper's own steps, with its code.
        'native/src/common/reaper_cgroup.c',
        'native/src/common/reaper_fs.c',
      ],
      'include_dirs': ["<!(node -p \"require('node-addon-api').include_dir\")", 'native/include'],
      'defines': ['NAPI_VERSION=8', 'NAPI_CPP_EXCEPTIONS', '_GNU_SOURCE',
                  # A completion that cannot throw into JS (the environment is being torn down) drops
                  # the exception instead of aborting the process from C++ (std::terminate).
                  'NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS'],
      'cflags!': ['-fno-exceptions'],
      'cflags_cc!': ['-fno-exceptions', '-std=gnu++17'],
      'cflags_cc': ['-std=c++17', '-fexceptions', '-fvisibility=hidden', '-fvisibility-inlines-hidden', '-Wall', '-Wextra', '-Wno-unused-parameter'],
      'cflags_c': ['-std=gnu11', '-fvisibility=hidden', '-Wall', '-Wextra'],
      'libraries': ['-ldl', '-lpthread'],
    },
    {
      'target_name': 'krun-shim',
      'type': 'executable',
      'sources': [
        'native/src/shim/krun_shim.c',
        'native/src/shim/shim_cmdline.c',
        'native/src/shim/shim_config.c',
        'native/src/shim/shim_json.c',
        'native/src/shim/shim_report.c',
        'native/src/shim/shim_userns.c',
      ],
      'include_dirs': ['native/include'],
      'cflags_c': ['-std=gnu11', '-Wall', '-Wextra', '-fvisibility=hidden'],
      'libraries': ['-ldl'],
    },
    {
      'target_name': 'krunbox-reaper',
      'type': 'executable',
      'sources': [
        'native/src/reaper/krunbox_reaper.c',
        'native/src/reaper/reaper_params.c',
        'native/src/reaper/reaper_wait.c',
        'native/src/common/reaper_cgroup.c',
        'native/src/common/reaper_fs.c',
      ],
      'cflags_c': ['-std=gnu11', '-Wall', '-Wextra', '-fvisibility=hidden'],
      # Static: one exec per sandbox with no dynamic loader to run first (libc.a only, no other library).
      'ldflags': ['-static'],
    },
    {
      'target_name': 'krunbox-reset',
      'type': 'executable',
      'sources': [
        'native/src/reset/krunbox_reset.c',
        'native/src/reset/reset_init.c',
        'native/src/reset/reset_ipc.c',
        'native/src/reset/reset_net.c',
        'native/src/reset/reset_root.c',
      ],
      'cflags_c': ['-std=gnu11', '-Wall', '-Wextra', '-fvisibility=hidden'],
      # Static like the reaper: one exec per reset of a pooled sandbox.
      'ldflags': ['-static'],
    },
  ],
}
