package io.lineage.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's local file system (checksummed, as {@code file:} is by default) whose permissions are set through
 * java.nio instead of a {@code chmod} subprocess.
 *
 * <p>Without Hadoop's native library (PySpark's pip package has none) {@link RawLocalFileSystem#setPermission}
 * runs {@code chmod} in a new process for every file it creates: ~4 ms each on the 2-core bench machine, and a
 * checkpoint file and its {@code .crc} are two. A Structured Streaming micro-batch creates several (the offset and
 * commit logs, each state store's changelog), on the path of every batch. The same mode bits are set here with
 * {@link Files#setPosixFilePermissions}; anything else (set-id or sticky bits, a file system without POSIX
 * attributes, the native library present) goes to Hadoop's own code. See stream_processor/localfs.py.
 */
public class NioLocalFileSystem extends LocalFileSystem {

    public NioLocalFileSystem() {
        super(new Raw());
    }

    /** The raw (unchecksummed) local file system under {@link NioLocalFileSystem}. */
    public static class Raw extends RawLocalFileSystem {
        private static final PosixFilePermission[] BITS = PosixFilePermission.values();  // OWNER_READ ... OTHERS_EXECUTE

        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            short mode = permission.toShort();
            if ((mode & ~0777) != 0 || NativeIO.isAvailable()) {
                super.setPermission(p, permission);
                return;
            }
            Set<PosixFilePermission> perms = EnumSet.noneOf(PosixFilePermission.class);
            for (int i = 0; i < 9; i++) {
                if ((mode & (0400 >> i)) != 0) {
                    perms.add(BITS[i]);
                }
            }
            try {
                Files.setPosixFilePermissions(pathToFile(p).toPath(), perms);
            } catch (UnsupportedOperationException e) {
                super.setPermission(p, permission);
            }
        }
    }
}
