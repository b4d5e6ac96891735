{
  # Three targets, built together by node-gyp:
  #   krunbox         the N-API addon (build/Release/krunbox.node), loaded by lib/native.ts
  #   krun-shim       one process per microVM (build/Release/krun-shim), resolved next to the addon
  #   krunbox-reaper  one process per sandbox that cleans up after it (build/Release/krunbox-reaper), beside it too
  # The libkrun test double is NOT built here (it must never ship): see scripts/build-native.sh.
  'targets': [
    {
      'target_name': 'krunbox',
      'sources': [
        'native/src/addon.cc',
        'native/src/child_table.cc',
        'native/src/exit_watch.cc',
        'native/src/fs_batch.cc',
        'native/src/idmap_helper.cc',
        'native/src/js_args.cc',
        'native/src/native_error.cc',
        'native/src/probe.cc',
        'native/src/process_signal.cc',
        # fsBatch's removeCgroup and removeTree are the reaper's own steps, with its code.
        'native/src/reaper_cgroup.c',
        'native/src/reaper_fs.c',
        'native/src/signal_names.cc',
        'native/src/spawn.cc',
        'native/src/spawn_launch.cc',
        'native/src/write_files.cc',
      ],
      'include_dirs': ["<!(node -p \"require('node-addon-api').include_dir\")"],
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
        'native/src/krun_shim.c',
        'native/src/shim_cmdline.c',
        'native/src/shim_config.c',
        'native/src/shim_json.c',
        'native/src/shim_report.c',
        'native/src/shim_userns.c',
      ],
      'include_dirs': ['native/include'],
      'cflags_c': ['-std=gnu11', '-Wall', '-Wextra', '-fvisibility=hidden'],
      'libraries': ['-ldl'],
    },
    {
      'target_name': 'krunbox-reaper',
      'type': 'executable',
      'sources': [
        'native/src/krunbox_reaper.c',
        'native/src/reaper_cgroup.c',
        'native/src/reaper_fs.c',
        'native/src/reaper_params.c',
        'native/src/reaper_wait.c',
      ],
      'cflags_c': ['-std=gnu11', '-Wall', '-Wextra', '-fvisibility=hidden'],
      # Static: one exec per sandbox with no dynamic loader to run first (libc.a only, no other library).
      'ldflags': ['-static'],
    },
  ],
}
