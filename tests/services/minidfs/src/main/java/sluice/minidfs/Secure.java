// The Kerberos side of the secure cluster (hdfs.sh start-secure): a MiniKdc, the
// principals and keytabs of the cluster and of one user, the server settings of a
// Kerberized HDFS with block access tokens and SASL data-transfer protection, and
// the client files (krb5.conf, the Hadoop keys) a user of such a cluster is given.
package sluice.minidfs;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Map;
import java.util.Properties;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.UserGroupInformation;

final class Secure {
    /** The short name of the user principal whose keytab the tests get. */
    static final String USER = "sluice";

    final MiniKdc kdc;
    final File dir;
    final String protection;
    final File serviceKeytab;
    final File userKeytab;

    private Secure(MiniKdc kdc, File dir, String protection) {
        this.kdc = kdc;
        this.dir = dir;
        this.protection = protection;
        this.serviceKeytab = new File(dir, "hdfs.keytab");
        this.userKeytab = new File(dir, USER + ".keytab");
    }

    /**
     * Starts a KDC whose tickets live at most ticketLifetime seconds and creates the
     * principals: hdfs/localhost and HTTP/localhost (namenode and datanodes), and
     * USER, each in a keytab under dir.
     */
    static Secure start(File dir, String protection, long ticketLifetime) throws Exception {
        switch (protection) {
            case "authentication": case "integrity": case "privacy": break;
            default: throw new IllegalArgumentException(
                "--protection must be authentication, integrity or privacy, not " + protection);
        }
        if (!dir.isDirectory() && !dir.mkdirs()) {
            throw new IOException("cannot create " + dir);
        }
        Properties kdcConf = MiniKdc.createConf();
        kdcConf.setProperty(MiniKdc.MAX_TICKET_LIFETIME, Long.toString(ticketLifetime));
        kdcConf.setProperty(MiniKdc.MAX_RENEWABLE_LIFETIME, Long.toString(ticketLifetime));
        MiniKdc kdc = new MiniKdc(kdcConf, new File(dir, "kdc"));
        kdc.start();
        Secure secure = new Secure(kdc, dir, protection);
        kdc.createPrincipal(secure.serviceKeytab, "hdfs/localhost", "HTTP/localhost");
        kdc.createPrincipal(secure.userKeytab, USER);
        return secure;
    }

    String realm() {
        return kdc.getRealm();
    }

    String userPrincipal() {
        return USER + "@" + realm();
    }

    /** The server settings of a Kerberized cluster, into conf. */
    void configureServer(Configuration conf) {
        String hdfsPrincipal = "hdfs/localhost@" + realm();
        conf.set("hadoop.security.authentication", "kerberos");
        conf.set("hadoop.security.authorization", "true");
        conf.set("hadoop.rpc.protection", protection);
        conf.set("dfs.data.transfer.protection", protection);
        conf.setBoolean("dfs.block.access.token.enable", true);
        conf.set("dfs.namenode.kerberos.principal", hdfsPrincipal);
        conf.set("dfs.namenode.keytab.file", serviceKeytab.getAbsolutePath());
        conf.set("dfs.datanode.kerberos.principal", hdfsPrincipal);
        conf.set("dfs.datanode.keytab.file", serviceKeytab.getAbsolutePath());
        conf.set("dfs.web.authentication.kerberos.principal", "HTTP/localhost@" + realm());
        conf.set("dfs.web.authentication.kerberos.keytab", serviceKeytab.getAbsolutePath());
        // Datanodes on unprivileged ports, protected by SASL instead (as on clusters
        // that run without jsvc).
        conf.setBoolean("ignore.secure.ports.for.testing", true);
        // Tickets live a minute: the cluster's own services log in again from their
        // keytab whenever theirs run out.
        conf.setBoolean("hadoop.kerberos.keytab.login.autorenewal.enabled", true);
        conf.setLong("hadoop.kerberos.min.seconds.before.relogin", 1);
        // The namenode closes a connection idle for 2 s (twice this), so a client
        // that pauses connects, and authenticates, again: a long job needs a valid
        // ticket after its first one expired.
        conf.setInt("ipc.client.connection.maxidletime", 1000);
        conf.setInt("ipc.client.idlethreshold", 0);
        conf.setInt("ipc.client.connection.idle-scan-interval.ms", 1000);
        UserGroupInformation.setConfiguration(conf);
    }

    /** The keys a client of this cluster needs beside fs.defaultFS. */
    void clientConf(Map<String, String> core, Map<String, String> hdfs) {
        String hdfsPrincipal = "hdfs/localhost@" + realm();
        core.put("hadoop.security.authentication", "kerberos");
        core.put("hadoop.rpc.protection", protection);
        hdfs.put("dfs.data.transfer.protection", protection);
        hdfs.put("dfs.namenode.kerberos.principal", hdfsPrincipal);
        hdfs.put("dfs.datanode.kerberos.principal", hdfsPrincipal);
    }

    /**
     * Writes the krb5.conf clients use (MIT's and Java's): the realm, its KDC, no
     * DNS look-ups, and TCP (the KDC listens on TCP only).
     */
    void writeKrb5Conf(File file) throws IOException {
        String text = String.join("\n",
            "[libdefaults]",
            "  default_realm = " + realm(),
            "  dns_lookup_kdc = false",
            "  dns_lookup_realm = false",
            "  dns_canonicalize_hostname = false",
            "  rdns = false",
            "  udp_preference_limit = 1",
            "  forwardable = true",
            "",
            "[realms]",
            "  " + realm() + " = {",
            "    kdc = localhost:" + kdc.getPort(),
            "  }",
            "",
            "[domain_realm]",
            "  localhost = " + realm(),
            "");
        File tmp = new File(file.getPath() + ".tmp");
        Files.write(tmp.toPath(), text.getBytes(StandardCharsets.UTF_8));
        if (!tmp.renameTo(file)) {
            throw new IOException("cannot rename " + tmp + " to " + file);
        }
    }

    /** The principal of the Hive Metastore in the KDC-only mode. */
    static final String HIVE_SERVICE = "hive/localhost";

    /**
     * The KDC alone (Main --kdc-only): its principals as in start (the hdfs and HTTP
     * services, USER) and HIVE_SERVICE, whose keys are in dir/hive.keytab; the
     * clients' krb5.conf and a core-site.xml saying Kerberos in confDir; prints
     * "Principal: USER@REALM", then "Ready!", and serves until killed.
     */
    static void serveKdcOnly(File dir, File confDir, long ticketLifetime) throws Exception {
        Secure secure = start(dir, "authentication", ticketLifetime);
        Runtime.getRuntime().addShutdownHook(new Thread(secure::stop, "kdc-shutdown"));
        secure.kdc.createPrincipal(new File(dir, "hive.keytab"), HIVE_SERVICE);
        if (!confDir.isDirectory() && !confDir.mkdirs()) {
            throw new IOException("cannot create " + confDir);
        }
        secure.writeKrb5Conf(new File(confDir, "krb5.conf"));
        Main.writeXml(new File(confDir, "core-site.xml"),
            Map.of("hadoop.security.authentication", "kerberos"));
        System.out.println("Principal: " + secure.userPrincipal());
        System.out.println("Ready!");
        System.out.flush();
        new java.util.concurrent.CountDownLatch(1).await();
    }

    void stop() {
        kdc.stop();
    }
}
